"""The real-Kafka harness: clusters work, are independent, and `mm2py dev` manages a demo pair."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import (
    CODECS,
    create_topic,
    make_records,
    produce_records,
    read_all,
    topic_names,
    unique,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("codec", CODECS)
def test_records_round_trip_through_a_real_broker(east: KafkaCluster, codec: str) -> None:
    topic = create_topic(east.bootstrap, unique(f"rt-{codec}"), partitions=2)
    sent = make_records(400, partition=None, tag=codec)
    sent = [r.__class__(r.key, r.value, r.headers, r.timestamp, i % 2) for i, r in enumerate(sent)]
    produce_records(east.bootstrap, topic, sent, compression=codec)
    got = read_all(east.bootstrap, topic)
    assert len(got) == len(sent)
    for p in (0, 1):
        want = [r.content() for r in sent if r.partition == p]
        have = [r.content() for r in got if r.partition == p]
        assert have == want
    assert any(r.headers for r in got) and any(r.key is None for r in got)


def test_clusters_are_independent(east: KafkaCluster, west: KafkaCluster) -> None:
    assert east.bootstrap != west.bootstrap
    topic = create_topic(east.bootstrap, unique("only-east"))
    assert topic in topic_names(east.bootstrap)
    assert topic not in topic_names(west.bootstrap)
    # each is its own cluster (their log directories are copies of one formatted directory, kept
    # between runs, with meta.properties rewritten)
    from confluent_kafka.admin import AdminClient

    ids = [AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(timeout=10).cluster_id
           for c in (east, west)]
    assert ids == [east.cluster_id, west.cluster_id] and ids[0] != ids[1]
    for c in (east, west):
        meta = (c.nodes[0].workdir / "data" / "meta.properties").read_text()
        assert f"cluster.id={c.cluster_id}\n" in meta and "node.id=1\n" in meta


def _mm2py(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mm2py.cli", *args], capture_output=True, text=True, env=env,
        timeout=180,
    )


def _our_brokers(home: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"kafka.Kafka" in cmd and str(home).encode() in cmd:
                pids.append(int(proc.name))
    return pids


def test_dev_up_status_down(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    env = {**os.environ, "MM2PY_DEV_HOME": str(tmp_path / "dev")}
    try:
        up = _mm2py("dev", "up", env=env)
        assert up.returncode == 0, up.stderr
        assert len(_our_brokers(tmp_path)) == 2

        status = _mm2py("dev", "status", env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        addresses = re.findall(r"127\.0\.0\.1:\d+", status.stdout)
        assert len(set(addresses)) == 2
        for address in addresses:
            md = AdminClient({"bootstrap.servers": address}).list_topics(timeout=10)
            assert len(md.brokers) == 1

        pids = sorted(_our_brokers(tmp_path))
        again = _mm2py("dev", "up", env=env)
        assert again.returncode == 0 and "already running" in again.stdout
        assert sorted(_our_brokers(tmp_path)) == pids
    finally:
        down = _mm2py("dev", "down", env=env)
    assert down.returncode == 0, down.stderr
    assert _our_brokers(tmp_path) == []
    assert _mm2py("dev", "status", env=env).returncode != 0
