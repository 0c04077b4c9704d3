"""Resumable progress and exact offset syncs, against real brokers and a real worker process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.types import TopicPartition
from tests.support.brokers import (
    BackgroundWorker,
    config_file,
    create_topic,
    end_offsets,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    read_syncs,
    total,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration


def _worker_process(
    config: Path, log: Path, commit_interval: float = 1, extra: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "mm2py.cli", "run", "-c", str(config),
         "--commit-interval", str(commit_interval), *extra],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
    )


def test_sigkill_mid_stream_then_restart_loses_nothing_and_duplicates_nothing(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path, record_property: object
) -> None:
    topic = create_topic(east.bootstrap, unique("kill"), partitions=3)
    config = tmp_path / "mm2.json"
    config_file(config, {"east": east.bootstrap, "west": west.bootstrap}, {"east->west": {"topics": topic}})
    sent = 60_000
    producing_done = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": east.bootstrap, "linger.ms": 5, "compression.type": "lz4"})
        for i in range(sent):
            while True:
                try:
                    p.produce(topic, str(i).encode(), str(i % 50).encode(), partition=i % 3)
                    break
                except BufferError:
                    p.poll(0.01)
            if i % 1000 == 0:
                p.flush(10)
                time.sleep(0.15)  # a ~10 s stream, so the kill lands mid-stream after commits
        p.flush(30)
        producing_done.set()

    producer = threading.Thread(target=produce)
    producer.start()
    log = tmp_path / "worker.log"
    proc = _worker_process(config, log)
    try:
        wait_until(lambda: total(west.bootstrap, f"east.{topic}") >= sent // 2, 120, 0.1,
                   "mirroring under way")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        killed_at = total(west.bootstrap, f"east.{topic}")
        assert not producing_done.is_set(), "the producer finished before the kill: not mid-stream"
        proc = _worker_process(config, log)
        producer.join(120)
        wait_until(lambda: total(west.bootstrap, f"east.{topic}") >= sent, 120, 0.5,
                   "everything mirrored after restart")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    got = read_all(west.bootstrap, f"east.{topic}")
    values = [int(r.value) for r in got if r.value is not None]
    missing = set(range(sent)) - set(values)
    duplicates = len(values) - len(set(values))
    print(f"\nSIGKILL at {killed_at} target records: {duplicates} duplicates, {len(missing)} missing")
    record_property("duplicates", duplicates)  # type: ignore[operator]
    assert not missing
    # the restarted worker recognised what reached the target after its last commit
    assert duplicates == 0
    for p in range(3):
        firsts: list[int] = []
        seen: set[int] = set()
        for r in got:
            v = int(r.value or b"-1")
            if r.partition == p and v not in seen:
                seen.add(v)
                firsts.append(v)
        assert firsts == sorted(firsts), f"partition {p} out of order"
    assert "stopped; progress committed" in log.read_text()


def test_sigkill_before_the_first_commit_duplicates_nothing(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path
) -> None:
    """A new partition's start is committed with the target end before anything is produced, so a
    worker killed before its first periodic commit does not mirror the partition again from 0."""
    topic = create_topic(east.bootstrap, unique("early-kill"), partitions=2)
    produce_records(east.bootstrap, topic, make_records(4000, tag="early"), compression="lz4")
    config = tmp_path / "mm2.json"
    config_file(config, {"east": east.bootstrap, "west": west.bootstrap}, {"east->west": {"topics": topic}})
    log = tmp_path / "worker.log"
    proc = _worker_process(config, log, commit_interval=3600)  # no periodic commit before the kill
    try:
        wait_until(lambda: total(west.bootstrap, f"east.{topic}") > 0, 120, 0.05, "mirroring under way")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc = _worker_process(config, log)
        # the restarted worker runs its task (its SIGTERM below must find it started) and the
        # target holds every record
        wait_until(lambda: log.read_text().count("now mirroring") == 2, 120, 0.1, "the restarted task")
        wait_until(lambda: total(west.bootstrap, f"east.{topic}") >= 4000, 120, 0.2,
                   "mirrored after restart")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    assert total(west.bootstrap, f"east.{topic}") == 4000, "records were mirrored twice"
    def content(bootstrap: str, name: str) -> Counter[tuple[object, ...]]:
        return Counter((r.partition, r.key, r.value) for r in read_all(bootstrap, name))

    assert content(west.bootstrap, f"east.{topic}") == content(east.bootstrap, topic)


def test_offset_syncs_translate_exactly_across_transaction_gaps(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    """Committed and aborted transactions leave offset gaps; translation stays exact."""
    topic = create_topic(east.bootstrap, unique("syncs"), partitions=1)
    tx = Producer({"bootstrap.servers": east.bootstrap, "transactional.id": unique("tx")})
    tx.init_transactions(30)
    plain = Producer({"bootstrap.servers": east.bootstrap, "linger.ms": 0})
    n = 0
    for round_ in range(12):
        for _ in range(7):
            plain.produce(topic, f"plain-{n}".encode())
            n += 1
        plain.flush(10)
        tx.begin_transaction()
        for i in range(5):
            tx.produce(topic, f"tx-{round_}-{i}".encode())
        tx.flush(30)  # on the broker before an abort (librdkafka drops what it still holds)
        if round_ % 3 == 1:
            tx.abort_transaction(30)
        else:
            tx.commit_transaction(30)
    config = mirror_config(
        {"east": east.bootstrap, "west": west.bootstrap},
        {"east->west": {"topics": topic, "offset.lag.max": 10}},
    )
    source = read_all(east.bootstrap, topic)  # read_committed: what a consumer sees
    with BackgroundWorker(config):
        wait_until(lambda: len(read_all(west.bootstrap, f"east.{topic}", timeout=10)) == len(source),
                   60, 0.5, "mirrored")
    target = read_all(west.bootstrap, f"east.{topic}")
    assert [r.value for r in target] == [r.value for r in source]

    store = OffsetSyncStore()
    for sync in read_syncs(east.bootstrap, "mm2-offset-syncs.west.internal"):
        if sync.topic_partition.topic == topic:
            store.add(sync)
    tp = TopicPartition(topic, 0)
    source_end = end_offsets(east.bootstrap, topic)[0]
    target_end = end_offsets(west.bootstrap, f"east.{topic}")[0]
    target_offset_of = {r.value: r.offset for r in target}
    for u in range(source[0].offset, source_end + 1):
        # a consumer at position u reads next the first committed record at or after u
        nxt = next((r for r in source if r.offset >= u), None)
        want = target_offset_of[nxt.value] if nxt is not None else target_end
        assert store.translate(tp, u, downstream_end=target_end) == want, f"upstream {u}"


def test_restart_behind_the_target_skips_what_is_already_there(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    """A position committed long before the crash (across transaction gaps) still duplicates nothing."""
    from mm2py.protocol.connect_offsets import Position
    from mm2py.rdkafka.admin import ClusterAdmin
    from mm2py.stores.positions import PositionStore

    topic = create_topic(east.bootstrap, unique("behind"), partitions=1)
    tx = Producer({"bootstrap.servers": east.bootstrap, "transactional.id": unique("tx")})
    tx.init_transactions(30)
    for round_ in range(10):
        tx.begin_transaction()
        for i in range(20):
            tx.produce(topic, f"tx-{round_}-{i}".encode())
        tx.flush(30)  # on the broker before an abort (librdkafka drops what it still holds)
        if round_ % 4 == 2:
            tx.abort_transaction(30)
        else:
            tx.commit_transaction(30)
    source = read_all(east.bootstrap, topic)
    config = mirror_config(
        {"east": east.bootstrap, "west": west.bootstrap}, {"east->west": {"topics": topic}}
    )
    target_topic = f"east.{topic}"
    with BackgroundWorker(config):  # the target holds no markers: its end is the record count
        wait_until(lambda: total(west.bootstrap, target_topic) == len(source), 60, 0.2, "mirrored")
    end = end_offsets(west.bootstrap, target_topic)[0]
    # rewind the committed position to the first batch boundary: (source 0, target 0)
    store = PositionStore(ClusterAdmin("west", west.bootstrap), "east")
    store.commit({TopicPartition(topic, 0): Position(0, 0)})
    store.close()
    source_end = end_offsets(east.bootstrap, topic)[0]
    with BackgroundWorker(config) as bg:
        runner = bg.worker.flows["east->west"].tasks[0]
        # resumed: the batches already on the target skipped, then fetched up to the source's end
        wait_until(lambda: runner.metrics.skipped_on_resume == source_end
                   and runner.metrics.lag.get(TopicPartition(topic, 0)) == 0, 60, 0.05, "the resume")
        skipped = runner.metrics.skipped_on_resume
    batches = runner.metrics.batches  # the worker stopped: whatever it sent has landed
    assert end_offsets(west.bootstrap, target_topic)[0] == end, "records were mirrored twice"
    assert batches == 0 and skipped == source_end
    assert [r.value for r in read_all(west.bootstrap, target_topic)] == [r.value for r in source]


def test_a_later_load_of_the_progress_reads_only_what_was_appended(west: KafkaCluster) -> None:
    """A task whose starts were deferred loads the progress again for each retry: the second load
    reads only the records appended since (another writer's commits and tombstones included) and
    folds to what a fresh full read finds."""
    from mm2py.protocol.connect_offsets import Position
    from mm2py.rdkafka.admin import ClusterAdmin
    from mm2py.stores.positions import PositionStore

    admin, alias = ClusterAdmin("west", west.bootstrap), unique("src")
    parts = [TopicPartition("orders", p) for p in range(50)]
    writer, reader = PositionStore(admin, alias, replication_factor=1), PositionStore(admin, alias)
    writer.ensure_topic()
    writer.commit({tp: Position(tp.partition, 10 * tp.partition) for tp in parts})
    assert reader.load() == {tp: Position(tp.partition, 10 * tp.partition) for tp in parts}
    assert reader.records_read == 50
    other = PositionStore(admin, alias)  # a second writer (another worker's task)
    other.commit({tp: Position(100 + tp.partition, 1000) for tp in parts[:10]})
    other.forget(parts[40:])
    expected = {**{tp: Position(tp.partition, 10 * tp.partition) for tp in parts[10:40]},
                **{tp: Position(100 + tp.partition, 1000) for tp in parts[:10]}}
    assert reader.load() == expected
    assert reader.records_read == 20  # the ten commits and ten tombstones, not the 70 records again
    assert PositionStore(admin, alias).load() == expected  # a full read agrees
    assert reader.load() == expected and reader.records_read == 0
    for store in (writer, reader, other):
        store.close()
