"""A target that takes smaller batches than its source (issue 46 item 1), on real brokers: ~4 MB
source batches into a remote topic created beforehand with the default 1 MiB limit are split and
mirrored exactly, every record once and in order, offsets translate exactly and ``mm2py audit``
agrees; a single record larger than the limit holds only its partition, named in an alarm, while its
sibling flows, and under ``skip`` it is left out with offsets still exact. The real MirrorMaker 2
copies the same large batches beside mm2py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.engine.translation import Direction
from mm2py.kafka_local import KafkaCluster
from mm2py.operations.translator import FlowTranslator
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.stores.positions import PositionStore
from tests.support.brokers import (
    BASE_TS,
    BackgroundWorker,
    Rec,
    by_partition,
    config_file,
    consume_and_commit,
    create_topic,
    end_offsets,
    mirror_config,
    produce_records,
    raw_batches,
    read_all,
    total,
    unique,
    wait_until,
)
from tests.support.mm2_process import mm2_command, mm2_properties, running

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: Kafka's default max.message.bytes (1 MiB and a record batch's log overhead)
DEFAULT_LIMIT = 1_048_588
BIG = {"max.message.bytes": str(8 * 1024 * 1024)}
#: a producer that writes batches of up to 4 MB (librdkafka's request limit raised to let it)
BIG_BATCHES = {"batch.size": 4_000_000, "message.max.bytes": 10_000_000, "batch.num.messages": 100_000}


#: as the issue's operator runs it: the remote topics' settings are the platform team's, not synced
#: (with the sync on, the source's max.message.bytes would be copied to the remote topic)
NO_CONFIG_SYNC = {"sync.topic.configs.enabled": False}


def _after(took: float, work: float = 1) -> float:
    """A later wait's bound, from how long the first step of the test took (``work``: how much more
    there is to do than then): generous, and longer on a slower, more loaded machine."""
    return 30 + 10 * work * took


def _clusters(east: KafkaCluster, west: KafkaCluster) -> dict[str, str]:
    return {"east": east.bootstrap, "west": west.bootstrap}


def _records(n: int, partitions: int, size: int = 1000, tag: str = "r") -> list[Rec]:
    """``n`` records of ``size``-byte values over ``partitions``: keys, headers on some, timestamps."""
    return [Rec(f"{tag}-{i}".encode(), f"{tag}-{i}-".encode().ljust(size, b"v"),
                (("i", str(i).encode()), ("n", None)) if i % 3 == 0 else (), BASE_TS + i, i % partitions)
            for i in range(n)]


def _audit(cfg: Path, topic: str) -> tuple[int, dict[str, Any], str]:
    """``mm2py audit`` as a user runs it: its exit status, its JSON report and its table."""
    report = cfg.with_suffix(".report.json")
    cmd = [sys.executable, "-m", "mm2py.cli", "audit", "-c", str(cfg), "--topics", topic,
           "--json", str(report)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    return out.returncode, json.loads(report.read_text()), out.stdout


def _flow(east: KafkaCluster, west: KafkaCluster, flows: dict[str, dict[str, object]]) -> FlowConfig:
    config = mirror_config(_clusters(east, west), flows)
    assert isinstance(config, MirrorMakerConfig)
    return config.flow("east", "west")


def _tasks(bg: BackgroundWorker) -> list[dict[str, Any]]:
    return list(bg.worker.flows["east->west"].status()["tasks"])


def test_source_batches_larger_than_the_remote_topic_takes_are_split_and_mirrored_exactly(
        east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> None:
    topic = create_topic(east.bootstrap, unique("split"), partitions=2, config=BIG)
    remote = create_topic(west.bootstrap, f"east.{topic}", partitions=2,
                          config={"max.message.bytes": str(DEFAULT_LIMIT)})
    sent = _records(16_000, 2)
    produce_records(east.bootstrap, topic, sent, linger_ms=2000, extra=BIG_BATCHES)
    source_batches = raw_batches(east.bootstrap, topic, 2)
    assert max(b.size for p in source_batches.values() for b in p) > 2 * DEFAULT_LIMIT  # ~4 MB batches

    # a consumer group stopped inside ~4 MB source batches: its failover must land on the same record
    group = unique("split-group")
    committed = consume_and_commit(east.bootstrap, group, topic, {0: 1234, 1: 5678})
    flows: dict[str, dict[str, object]] = {"east->west": {
        "topics": topic, **NO_CONFIG_SYNC, "groups": group, "emit.checkpoints.interval.seconds": 1,
        "sync.group.offsets.enabled": True, "sync.group.offsets.interval.seconds": 1}}
    with BackgroundWorker(mirror_config(_clusters(east, west), flows)) as bg:
        took = wait_until(lambda: total(west.bootstrap, remote) >= 16_000, 180, 0.5, "every record mirrored")
        # the target offsets are the source's here (both partitions mirrored from 0, no gap)
        wait_until(lambda: {tp.partition: o.offset for tp, o in ClusterAdmin("west", west.bootstrap)
                            .group_offsets([group])[group].items()} == committed, _after(took), 0.5,
                   "the group's offsets synced to the target")
        tasks = _tasks(bg)
    assert sum(t["split_batches"] for t in tasks) > 0
    assert all(t["state"] == "RUNNING" and not t["held_partitions"] and not t["alarms"] for t in tasks)

    got = read_all(west.bootstrap, remote)
    assert len(got) == 16_000  # each once
    assert by_partition(got) == by_partition(read_all(east.bootstrap, topic))  # in order, same content
    target_batches = raw_batches(west.bootstrap, remote, 2)
    assert all(b.size <= DEFAULT_LIMIT for p in target_batches.values() for b in p)
    assert {b.codec for p in target_batches.values() for b in p} == {b.codec for p in source_batches.values()
                                                                      for b in p}

    # offsets translate exactly either way, inside split batches too (the target offsets are the
    # source's here: both partitions were mirrored from offset 0, with no gap)
    tr = FlowTranslator.read(_flow(east, west, flows))
    for p in range(2):
        offsets = [*range(0, 8000, 331), 7999, 8000]
        assert [tr.translate(topic, p, u, Direction.FORWARD).target_offset for u in offsets] == offsets
        inside = offsets[:-1]
        assert [tr.translate(remote, p, d, Direction.BACK).source_offset for d in inside] == inside

    code, report, table = _audit(config_file(tmp_path / "audit.json", _clusters(east, west), flows), topic)
    assert code == 0 and report["verdict"] == "agree", table

    # a restart from positions committed long before: the tail reconciler recognises the split
    # batches on the target (the first records of a source batch, then the next, ...), so
    # nothing is mirrored twice
    ends = end_offsets(west.bootstrap, remote)
    store = PositionStore(ClusterAdmin("west", west.bootstrap), "east")
    store.commit({TopicPartition(topic, p): Position(0, 0) for p in range(2)})
    store.close()
    with BackgroundWorker(mirror_config(_clusters(east, west), flows)) as bg:
        runners = bg.worker.flows["east->west"].tasks.values()
        wait_until(lambda: sum(r.metrics.skipped_on_resume for r in runners) == 16_000, _after(took), 0.2,
                   "the resume")
    assert sum(r.metrics.batches for r in runners) == 0
    assert end_offsets(west.bootstrap, remote) == ends, "records were mirrored twice"


def test_a_record_larger_than_the_remote_topic_takes_holds_only_its_partition(
        east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> None:
    topic = create_topic(east.bootstrap, unique("huge"), partitions=2, config=BIG)
    remote = create_topic(west.bootstrap, f"east.{topic}", partitions=2,
                          config={"max.message.bytes": str(DEFAULT_LIMIT)})
    huge = Rec(b"huge", os.urandom(2 * 1024 * 1024), (), BASE_TS, 0)
    before, after = _records(100, 1, tag="before"), _records(100, 1, tag="after")
    produce_records(east.bootstrap, topic, [*before, huge, *after], linger_ms=50, extra=BIG_BATCHES)
    produce_records(east.bootstrap, topic, [Rec(r.key, r.value, r.headers, r.timestamp, 1)
                                            for r in _records(300, 1, tag="sibling")])

    flows: dict[str, dict[str, object]] = {"east->west": {"topics": topic, **NO_CONFIG_SYNC}}
    with BackgroundWorker(mirror_config(_clusters(east, west), flows)) as bg:
        took = wait_until(lambda: any(t["held_partitions"] for t in _tasks(bg)), 180, 0.5, "partition 0 held")
        wait_until(lambda: total(west.bootstrap, remote) >= 400, _after(took), 0.5, "what can be mirrored")
        # the sibling keeps flowing after the alarm
        produce_records(east.bootstrap, topic, [Rec(r.key, r.value, r.headers, r.timestamp, 1)
                                                for r in _records(200, 1, tag="later")])
        wait_until(lambda: total(west.bootstrap, remote) >= 600, _after(took), 0.5, "the sibling later")
        tasks = _tasks(bg)
    assert [t["held_partitions"] for t in tasks if t["held_partitions"]] == [[f"{topic}-0"]]
    assert all(t["state"] == "RUNNING" for t in tasks)
    assert sum(t["alarms"].get("target.too.large", 0) for t in tasks) == 1
    alarm = next(a for t in tasks for a in t["recent_alarms"] if "target.too.large" in a or "offset 100" in a)
    assert f"{topic}-0" in alarm and "offset 100" in alarm and f"east.{topic}" in alarm
    size = int(re.search(r"is (\d+) bytes", alarm).group(1))  # type: ignore[union-attr]
    assert f"{DEFAULT_LIMIT} bytes" in alarm and 2 * 1024 * 1024 < size < 2 * 1024 * 1024 + 200
    by = by_partition(read_all(west.bootstrap, remote))
    assert len(by[0]) == 100 and len(by[1]) == 500

    # under skip the record is left out: the partition goes on from the next one, offsets exact
    flows["east->west"]["mm2py.alarm.target.too.large"] = "skip"
    with BackgroundWorker(mirror_config(_clusters(east, west), flows)) as bg:
        wait_until(lambda: total(west.bootstrap, remote) >= 700, _after(took), 0.5, "past the record")
        tasks = _tasks(bg)
    assert sum(t["alarms"].get("target.too.large", 0) for t in tasks) == 1
    assert not any(t["held_partitions"] for t in tasks)
    got = by_partition(read_all(west.bootstrap, remote))
    assert got[0] == [r for r in by_partition(read_all(east.bootstrap, topic))[0] if r != huge.content()]
    tr = FlowTranslator.read(_flow(east, west, flows))
    assert [tr.translate(topic, 0, u, Direction.FORWARD).target_offset for u in (99, 101, 150, 201)] == [
        99, 100, 149, 200]


def test_a_limit_lowered_while_mirroring_is_learnt_from_the_refusal(
        east: KafkaCluster, west: KafkaCluster) -> None:
    """The remote topic takes 8 MiB batches, then its max.message.bytes is lowered to 1 MiB while
    the flow runs: the next large batch is refused, the limit asked for again, and from then on
    batches are split; every record once and in order."""
    topic = create_topic(east.bootstrap, unique("lowered"), partitions=1, config=BIG)
    remote = create_topic(west.bootstrap, f"east.{topic}", partitions=1, config=BIG)
    first, later = _records(8000, 1, tag="first"), _records(8000, 1, tag="later")
    produce_records(east.bootstrap, topic, first, linger_ms=2000, extra=BIG_BATCHES)
    flows: dict[str, dict[str, object]] = {"east->west": {"topics": topic, **NO_CONFIG_SYNC}}
    with BackgroundWorker(mirror_config(_clusters(east, west), flows)) as bg:
        took = wait_until(lambda: total(west.bootstrap, remote) >= 8000, 180, 0.5, "the first records")
        assert sum(t["split_batches"] for t in _tasks(bg)) == 0  # 8 MiB: nothing to split
        lowered = end_offsets(west.bootstrap, remote)[0]
        client = AdminClient({"bootstrap.servers": west.bootstrap})  # must outlive its futures
        change = AlterConfigOpType.SET
        resource = ConfigResource(ResourceType.TOPIC, remote, incremental_configs=[
            ConfigEntry("max.message.bytes", str(DEFAULT_LIMIT), incremental_operation=change)])
        for future in client.incremental_alter_configs([resource]).values():
            future.result(30)
        produce_records(east.bootstrap, topic, later, linger_ms=2000, extra=BIG_BATCHES)
        wait_until(lambda: total(west.bootstrap, remote) >= 16_000, _after(took, 2), 0.5, "the later records")
        tasks = bg.worker.flows["east->west"].status()["tasks"]
        runners = bg.worker.flows["east->west"].tasks.values()
        refused = sum(r.metrics.sink_failures + r.metrics.restarts for r in runners)
    assert refused > 0  # the limit was learnt from a refusal: the one it knew said 8 MiB
    assert sum(t["split_batches"] for t in tasks) > 0
    assert by_partition(read_all(west.bootstrap, remote)) == by_partition(read_all(east.bootstrap, topic))
    after = [b for b in raw_batches(west.bootstrap, remote, 1)[0] if b.base_offset >= lowered]
    assert after and all(b.size <= DEFAULT_LIMIT for b in after)


def test_mirrormaker2_beside_mm2py_copies_the_same_large_batches_into_a_1_mib_remote_topic(
        east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> None:
    """The issue's case with the real MirrorMaker 2 beside mm2py: ~4 MB source batches, each peer
    into its own remote topic created beforehand with the default 1 MiB limit (MM2 as alias ``mm2``,
    mm2py as ``east``). MM2 re-produces the records in batches of its producer's size; mm2py splits
    the refused batches. Both remote topics end up holding every record once and in order."""
    topic = create_topic(east.bootstrap, unique("beside"), partitions=2, config=BIG)
    limit = {"max.message.bytes": str(DEFAULT_LIMIT)}
    ours = create_topic(west.bootstrap, f"east.{topic}", partitions=2, config=limit)
    theirs = create_topic(west.bootstrap, f"mm2.{topic}", partitions=2, config=limit)
    produce_records(east.bootstrap, topic, _records(8_000, 2), linger_ms=2000, extra=BIG_BATCHES)
    assert max(b.size for p in raw_batches(east.bootstrap, topic, 2).values() for b in p) > 2 * DEFAULT_LIMIT

    cfg = mm2_properties(tmp_path / "mm2.properties", "mm2", "west", east.bootstrap, west.bootstrap, topic,
                         # its remote topic's limit as the platform team set it; its offset syncs
                         # on the target, apart from mm2py's on the source
                         **{"mm2->west.sync.topic.configs.enabled": "false",
                            "mm2->west.offset-syncs.topic.location": "target"})
    flows: dict[str, dict[str, object]] = {"east->west": {"topics": topic, **NO_CONFIG_SYNC}}
    with running(mm2_command(cfg, tmp_path), tmp_path / "mm2.out") as mm2, \
            BackgroundWorker(mirror_config(_clusters(east, west), flows)) as bg:
        took = wait_until(lambda: total(west.bootstrap, ours) >= 8_000, 180, 0.5, "mm2py's copy")
        # MM2 starts its Connect worker first: its own time, measured from the run's start (180 s
        # at most, as for mm2py), plus mm2py's
        wait_until(lambda: total(west.bootstrap, theirs) >= 8_000 or mm2.poll() is not None,
                   180 + _after(took), 0.5, "MirrorMaker 2's copy")
        assert mm2.poll() is None, (tmp_path / "mm2.out").read_text()[-3000:]
        tasks = _tasks(bg)
    assert sum(t["split_batches"] for t in tasks) > 0
    source = by_partition(read_all(east.bootstrap, topic))
    assert by_partition(read_all(west.bootstrap, ours)) == source
    assert by_partition(read_all(west.bootstrap, theirs)) == source
    for remote in (ours, theirs):
        batches = raw_batches(west.bootstrap, remote, 2)
        assert all(b.size <= DEFAULT_LIMIT for p in batches.values() for b in p)
