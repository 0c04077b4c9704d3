"""`mm2py audit` against real brokers: a mirrored set of topics agrees (a million records compared
batch by batch, small batches merged by the mirror and transactions compared record by record); a
record produced straight into the remote topic, and source records deleted before a paused flow
read them, are named at their exact offsets; a target that Apache MirrorMaker 2 itself filled
agrees, record by record."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient

from mm2py.config.errors import ConfigError
from mm2py.kafka_local import KafkaCluster
from mm2py.operations.audit.run import audit_flow
from tests.support.brokers import (
    BASE_TS,
    BackgroundWorker,
    Rec,
    config_file,
    create_topic,
    end_offsets,
    make_records,
    mirror_config,
    produce_records,
    read_syncs,
    topic_names,
    total,
    unique,
    wait_until,
)
from tests.support.mm2_process import mm2_command, mm2_properties, running

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _clusters(east: KafkaCluster, west: KafkaCluster) -> dict[str, str]:
    return {"east": east.bootstrap, "west": west.bootstrap}


def _audit(cfg: Path, topics: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    """``mm2py audit`` as a user runs it: its exit status, its JSON report and its table."""
    report = cfg.with_suffix(".report.json")
    cmd = [sys.executable, "-m", "mm2py.cli", "audit", "-c", str(cfg), "--topics", topics, *extra]
    out = subprocess.run([*cmd, "--json", str(report)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    return out.returncode, json.loads(report.read_text()), out.stdout


def _partitions(report: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(p["topic"], p["partition"]): p for p in report["partitions"]}


def _fast_backlog(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    """``n`` small records (a 7-byte value each) in large lz4 batches, quickly (a long linger: the
    batches stay large even when a loaded machine slows this loop down)."""
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 200, "acks": "all",
                  "batch.size": 1 << 20, "batch.num.messages": 1_000_000,
                  "queue.buffering.max.kbytes": 262144})
    for i in range(n):
        while True:
            try:
                p.produce(topic, b"%07d" % i, partition=i % partitions, timestamp=BASE_TS + i // 1000)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def _small_batches_and_transactions(bootstrap: str, small: str, txn: str) -> int:
    """``small``: 2 partitions of ~4-record batches (the mirror merges them); ``txn``: plain records
    around a committed and an aborted transaction. Returns the records a consumer sees in ``txn``."""
    recs = [Rec(r.key, r.value, r.headers, r.timestamp, i % 2) for i, r in enumerate(make_records(4000))]
    produce_records(bootstrap, small, recs, compression="lz4", linger_ms=0,
                    extra={"batch.num.messages": 4, "batch.size": 1024})
    produce_records(bootstrap, txn, make_records(100, tag="before"), compression="zstd")
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
    tx.init_transactions(30)
    for abort in (False, True):
        tx.begin_transaction()
        for i in range(6):
            tx.produce(txn, f"tx-{abort}-{i}".encode(), partition=0)
        tx.flush(30)  # on the broker before the abort
        (tx.abort_transaction if abort else tx.commit_transaction)(30)
    later = make_records(100, tag="after", start_ts=BASE_TS + 1000)
    produce_records(bootstrap, txn, later, compression="zstd")
    return 206


def test_a_mirrored_set_of_topics_agrees(east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> None:
    prefix = unique("aud")
    big = create_topic(east.bootstrap, f"{prefix}-big", partitions=4)
    small = create_topic(east.bootstrap, f"{prefix}-small", partitions=2)
    txn = create_topic(east.bootstrap, f"{prefix}-txn")
    _fast_backlog(east.bootstrap, big, 1_000_000, 4)
    visible = _small_batches_and_transactions(east.bootstrap, small, txn)
    # the small topic's batches (under 1 KiB) are merged by the mirror, the big one's pass as they are
    flows = {"east->west": {"topics": f"{prefix}-.*", "mm2py.coalesce.threshold.bytes": 1024}}
    want = {f"east.{big}": 1_000_000, f"east.{small}": 4000, f"east.{txn}": visible}
    with BackgroundWorker(mirror_config(_clusters(east, west), flows)):
        wait_until(lambda: all(total(west.bootstrap, t) == n for t, n in want.items()), 180, 0.5, "mirrored")
    cfg = config_file(tmp_path / "audit.json", _clusters(east, west), flows)

    start = time.monotonic()
    code, report, table = _audit(cfg, f"{prefix}-.*")
    print(f"\naudit of 1,004,206 records: {time.monotonic() - start:.1f} s\n{table}")
    assert code == 0 and report["verdict"] == "agree", table
    parts = _partitions(report)
    assert len(parts) == 7 and all(p["status"] == "agree" and not p["first_mismatch"] for p in parts.values())
    ends = end_offsets(east.bootstrap, big)
    for p in range(4):
        part = parts[(big, p)]
        assert part["compared"] == "batches" and part["records_compared"] == 0, part
        assert part["source_verified"] == part["target_verified"] == {"first": 0, "last": ends[p] - 1}
    assert {parts[(small, p)]["compared"] for p in range(2)} == {"records"}  # merged by the mirror
    assert sum(parts[(small, p)]["records_compared"] for p in range(2)) == 4000
    assert parts[(txn, 0)]["source_verified"] == {"first": 0, "last": 213}  # markers, aborted records
    assert parts[(txn, 0)]["target_verified"] == {"first": 0, "last": visible - 1}
    assert report["anchors"]["offset_syncs"] > 0 and report["source_bytes"] > 4_000_000

    # the same audit in process (mm2py.operations.audit.run), of the topics a pattern selects
    flow = mirror_config(_clusters(east, west), flows).flows["east->west"]  # type: ignore[attr-defined]
    subset = asyncio.run(audit_flow(flow, re.compile(re.escape(small))))
    assert (subset.flow, subset.source, subset.target) == ("east->west", "east", "west")
    assert subset.verdict == "agree", subset.partitions
    assert sorted((p.topic, p.partition, p.target_topic) for p in subset.partitions) == [
        (small, 0, f"east.{small}"), (small, 1, f"east.{small}")]
    assert sum(p.records_compared for p in subset.partitions) == 4000
    assert subset.source_bytes == sum(p.source_bytes for p in subset.partitions) > 0
    assert 0 <= subset.compare_seconds <= subset.seconds
    with pytest.raises(ConfigError, match=r"no topic matching '.*nothing-here' on 'east' is one flow") as err:
        asyncio.run(audit_flow(flow, re.compile(f"{prefix}-nothing-here")))
    assert err.value.key == "--topics"


def test_a_record_produced_into_the_remote_topic_is_named_at_its_offset(
        east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> None:
    topic = create_topic(east.bootstrap, unique("aud-foreign"), partitions=2)
    remote = f"east.{topic}"
    recs = [Rec(r.key, r.value, r.headers, r.timestamp, i % 2) for i, r in enumerate(make_records(5000))]
    produce_records(east.bootstrap, topic, recs, compression="lz4", linger_ms=20)
    flows = {"east->west": {"topics": topic}}
    with BackgroundWorker(mirror_config(_clusters(east, west), flows)):
        wait_until(lambda: total(west.bootstrap, remote) == 5000, 60, 0.5, "mirrored")
    foreign_at = end_offsets(west.bootstrap, remote)[1]
    intruder = Rec(b"intruder", b"not from east", timestamp=BASE_TS, partition=1)
    produce_records(west.bootstrap, remote, [intruder])
    produce_records(east.bootstrap, topic, [Rec(r.key, r.value, r.headers, r.timestamp, i % 2)
                                           for i, r in enumerate(make_records(3000, tag="later"))])
    with BackgroundWorker(mirror_config(_clusters(east, west), flows)):  # mirrors on past the intruder
        wait_until(lambda: total(west.bootstrap, remote) == 8001, 60, 0.5, "mirrored again")

    code, report, table = _audit(config_file(tmp_path / "audit.json", _clusters(east, west), flows), topic)
    assert code == 1 and report["verdict"] == "disagree", table
    parts = _partitions(report)
    assert parts[(topic, 0)]["status"] == "agree"
    bad = parts[(topic, 1)]
    assert bad["status"] == "mismatch" and bad["first_mismatch"]["kind"] == "extra"
    assert bad["first_mismatch"]["target"] == {"first": foreign_at, "last": foreign_at}
    assert bad["target_verified"] == {"first": 0, "last": foreign_at - 1}
    assert f"extra: source {foreign_at}, target {foreign_at}" in table


def test_records_deleted_ahead_of_a_paused_flow_are_named(
        east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> None:
    topic = create_topic(east.bootstrap, unique("aud-deleted"))
    remote = f"east.{topic}"
    produce_records(east.bootstrap, topic, make_records(5000), compression="zstd", linger_ms=20)
    flows = {"east->west": {"topics": topic}}
    with BackgroundWorker(mirror_config(_clusters(east, west), flows)):
        wait_until(lambda: total(west.bootstrap, remote) == 5000, 60, 0.5, "mirrored")
    # while the flow is stopped: 3000 more records, of which the first 1000 are deleted
    produce_records(east.bootstrap, topic, make_records(3000, tag="later"), compression="zstd", linger_ms=20)
    admin = AdminClient({"bootstrap.servers": east.bootstrap})  # must outlive its futures
    for future in admin.delete_records([KafkaPartition(topic, 0, 6000)]).values():
        assert future.result(30).low_watermark == 6000
    with BackgroundWorker(mirror_config(_clusters(east, west), flows)):
        wait_until(lambda: total(west.bootstrap, remote) == 7000, 60, 0.5, "mirrored from the new log start")

    code, report, table = _audit(config_file(tmp_path / "audit.json", _clusters(east, west), flows), topic)
    assert code == 1 and report["verdict"] == "disagree", table
    part = _partitions(report)[(topic, 0)]
    assert part["status"] == "mismatch", part
    assert part["first_mismatch"]["kind"] == "source_deleted"
    assert part["first_mismatch"]["source"] == {"first": 5000, "last": 5999}
    assert part["first_mismatch"]["target"] == {"first": 5000, "last": 5000}  # where the mirror went on
    assert part["source_verified"] == {"first": 6000, "last": 7999}
    assert part["target_verified"] == {"first": 5000, "last": 6999}
    assert "source offsets 5000..5999 (1000 offsets) were never mirrored" in table


def test_a_target_mirrored_by_apache_mirrormaker_2_agrees_record_by_record(
        east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> None:
    src, dst = unique("a"), unique("b")
    topic = create_topic(east.bootstrap, unique("aud-mm2"), 3)
    recs = [Rec(r.key, r.value, r.headers, r.timestamp, i % 3) for i, r in enumerate(make_records(20_000))]
    cfg = mm2_properties(tmp_path / "mm2.properties", src, dst, east.bootstrap, west.bootstrap, topic)
    # one record a partition first, and MM2's sync of each: MM2 keeps only the newest of the syncs
    # it has not sent yet, so under a backlog (on a loaded machine) the sync of offset 0 can be
    # replaced by a later one, and the audit verifies from its first sync on
    produce_records(east.bootstrap, topic, recs[:3], compression="zstd")
    syncs = f"mm2-offset-syncs.{dst}.internal"
    with running(mm2_command(cfg, tmp_path), tmp_path / "mm2.out") as proc:
        def first_synced() -> bool:
            assert proc.poll() is None, f"MirrorMaker 2 exited (see {tmp_path})"
            return syncs in topic_names(east.bootstrap) and {
                s.topic_partition.partition for s in read_syncs(east.bootstrap, syncs)
                if s.topic_partition.topic == topic and s.upstream_offset == 0} == {0, 1, 2}

        wait_until(first_synced, 120, 0.5, f"MirrorMaker 2's syncs of offset 0 (see {tmp_path})")
        produce_records(east.bootstrap, topic, recs[3:], compression="zstd", linger_ms=5)
        wait_until(lambda: total(west.bootstrap, f"{src}.{topic}") >= 20_000, 180, 0.5,
                   f"MirrorMaker 2 mirroring (see {tmp_path})")
        proc.send_signal(signal.SIGTERM)
        proc.wait(90)

    code, report, table = _audit(cfg, topic, "--flow", f"{src}->{dst}")
    assert code == 0 and report["verdict"] == "agree", table
    parts = _partitions(report)
    ends = end_offsets(east.bootstrap, topic)
    assert len(parts) == 3
    for p, part in enumerate(parts[(topic, p)] for p in range(3)):
        assert part["status"] == "agree" and part["compared"] == "records", part
        assert part["source_verified"] == part["target_verified"] == {"first": 0, "last": ends[p] - 1}
        # MM2 re-batched the backlog: compared record by record (but for the first record, produced
        # alone, whose batch MM2 may have copied as it was)
        assert part["records_compared"] >= ends[p] - 1
    assert report["anchors"]["offset_syncs"] >= 3  # MirrorMaker 2's own syncs
    assert {part["anchor"]["kind"] for part in parts.values()} == {"offset sync"}
