"""Coalescing of small batches against real brokers: a backlog written in tiny batches arrives
identical and in order in fewer, larger batches, with exact offset syncs and an exact resume; with
coalescing off the target batches are the source batches."""

from __future__ import annotations

import bisect
import random

import pytest
from confluent_kafka import Producer

from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.coalesce import CoalesceCounters
from mm2py.protocol.types import TopicPartition
from tests.support.brokers import (
    BASE_TS,
    BackgroundWorker,
    Rec,
    by_partition,
    create_topic,
    end_offsets,
    mirror_config,
    produce_records,
    raw_batches,
    read_all,
    read_syncs,
    total,
    unique,
    wait_until,
    without_producer_state,
)

pytestmark = pytest.mark.integration

PARTITIONS = 2


def _small_batch_backlog(bootstrap: str, topic: str, n: int, transactions: bool = True) -> None:
    """``n`` records per partition in ~1 KiB lz4 batches of 4 records, with a committed and an
    aborted transaction in the middle of each partition (offset gaps coalescing must not cross)."""
    rnd = random.Random(topic)
    half = n // 2
    for part in (0, 1):
        recs = [
            Rec(f"k{i % 13}".encode(), rnd.randbytes(120) + f"-{part}-{i}".encode(),
                (("i", str(i).encode()),) if i % 3 else (), BASE_TS + i * 7 - (i % 5) * 3,
                part)
            for i in range(n)
        ]
        small = {"batch.num.messages": 4, "batch.size": 1024}
        produce_records(bootstrap, topic, recs[:half], compression="lz4", linger_ms=0, extra=small)
        if not transactions:
            produce_records(bootstrap, topic, recs[half:], compression="lz4", linger_ms=0, extra=small)
            continue
        tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
        tx.init_transactions(30)
        for abort in (False, True):
            tx.begin_transaction()
            for i in range(6):
                tx.produce(topic, f"tx-{abort}-{i}".encode(), partition=part)
            tx.flush(30)  # on the broker before the abort (librdkafka drops what it still holds)
            if abort:
                tx.abort_transaction(30)
            else:
                tx.commit_transaction(30)
        produce_records(bootstrap, topic, recs[half:], compression="lz4", linger_ms=0, extra=small)


def _mirror(east: KafkaCluster, west: KafkaCluster, topic: str, **settings: object) -> None:
    config = mirror_config({"east": east.bootstrap, "west": west.bootstrap},
                           {"east->west": {"topics": topic, "offset.lag.max": 50, **settings}})
    source_ends = end_offsets(east.bootstrap, topic)
    records = len(read_all(east.bootstrap, topic))

    with BackgroundWorker(config) as bg:  # the target holds no markers: its end is the record count
        wait_until(lambda: total(west.bootstrap, f"east.{topic}") == records, 120, 0.2, "backlog mirrored")
        runner = bg.worker.flows["east->west"].tasks[0]
        wait_until(lambda: all(runner.positions().get(TopicPartition(topic, p)) == source_ends[p]
                               for p in range(PARTITIONS)), 30, 0.2, "positions at the source end")


def test_small_batch_backlog_arrives_identical_in_larger_batches_with_exact_offset_syncs(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    topic = create_topic(east.bootstrap, unique("small"), partitions=PARTITIONS)
    _small_batch_backlog(east.bootstrap, topic, 3000)
    source_batches = raw_batches(east.bootstrap, topic, PARTITIONS)
    assert sum(len(bs) for bs in source_batches.values()) > 1000
    before = CoalesceCounters.snapshot()
    _mirror(east, west, topic)
    assert CoalesceCounters.snapshot()[0] > before[0], "nothing was merged"

    source, target = read_all(east.bootstrap, topic), read_all(west.bootstrap, f"east.{topic}")
    assert by_partition(target) == by_partition(source)  # keys, values, headers, timestamps, order
    target_batches = raw_batches(west.bootstrap, f"east.{topic}", PARTITIONS)
    for p in range(PARTITIONS):
        src = [b for b in source_batches[p] if not b.is_control]
        dst = target_batches[p]
        src_avg = sum(len(b) for b in src) / len(src)
        dst_avg = sum(len(b) for b in dst) / len(dst)
        print(f"\npartition {p}: {len(src)} source batches of {src_avg:.0f} B on average, "
              f"{len(dst)} target batches of {dst_avg:.0f} B")
        assert src_avg < 2048 and dst_avg >= 8 * 1024
        assert {b.codec for b in dst} == {b.codec for b in src}
        assert all(b.crc_ok() for b in dst)

    store = OffsetSyncStore()
    for sync in read_syncs(east.bootstrap, "mm2-offset-syncs.west.internal"):
        if sync.topic_partition.topic == topic:
            store.add(sync)
    target_ends = end_offsets(west.bootstrap, f"east.{topic}")
    for p in range(PARTITIONS):
        tp = TopicPartition(topic, p)
        mine = [r for r in source if r.partition == p]
        offsets = [r.offset for r in mine]
        target_offset_of = {r.value: r.offset for r in target if r.partition == p}
        for u in range(end_offsets(east.bootstrap, topic)[p] + 1):
            # a consumer at position u reads next the first committed record at or after u
            i = bisect.bisect_left(offsets, u)
            want = target_offset_of[mine[i].value] if i < len(mine) else target_ends[p]
            assert store.translate(tp, u, downstream_end=target_ends[p]) == want, f"{tp} at {u}"


def test_coalescing_off_mirrors_the_source_batches_byte_identical(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    topic = create_topic(east.bootstrap, unique("asis"), partitions=PARTITIONS)
    _small_batch_backlog(east.bootstrap, topic, 600, transactions=False)
    before = CoalesceCounters.snapshot()
    _mirror(east, west, topic, **{"mm2py.coalesce.enabled": False})
    assert CoalesceCounters.snapshot() == before
    source_batches = raw_batches(east.bootstrap, topic, PARTITIONS)
    target_batches = raw_batches(west.bootstrap, f"east.{topic}", PARTITIONS)
    for p in range(PARTITIONS):
        assert len(source_batches[p]) > 100
        assert [without_producer_state(b) for b in target_batches[p]] == [
            without_producer_state(b) for b in source_batches[p]
        ]


def test_restart_behind_the_target_recognises_merged_batches(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    """A position committed long before the crash: the restarted worker walks merged target
    batches against the source's small batches and mirrors nothing twice."""
    from mm2py.protocol.connect_offsets import Position
    from mm2py.rdkafka.admin import ClusterAdmin
    from mm2py.stores.positions import PositionStore

    topic = create_topic(east.bootstrap, unique("rewind"), partitions=PARTITIONS)
    _small_batch_backlog(east.bootstrap, topic, 1500)
    _mirror(east, west, topic)
    ends = end_offsets(west.bootstrap, f"east.{topic}")
    store = PositionStore(ClusterAdmin("west", west.bootstrap), "east")
    store.commit({TopicPartition(topic, p): Position(0, 0) for p in range(PARTITIONS)})
    store.close()
    config = mirror_config({"east": east.bootstrap, "west": west.bootstrap},
                           {"east->west": {"topics": topic}})
    with BackgroundWorker(config) as bg:
        runner = bg.worker.flows["east->west"].tasks[0]
        source_ends = end_offsets(east.bootstrap, topic)
        wait_until(lambda: all(runner.positions().get(TopicPartition(topic, p)) == source_ends[p]
                               for p in range(PARTITIONS)), 60, 0.2, "resumed at the source end")
    # the worker stopped: whatever its task sent has landed
    skipped, batches = runner.metrics.skipped_on_resume, runner.metrics.batches
    assert end_offsets(west.bootstrap, f"east.{topic}") == ends, "records were mirrored twice"
    assert batches == 0 and skipped == sum(source_ends.values())
    assert by_partition(read_all(west.bootstrap, f"east.{topic}")) == by_partition(
        read_all(east.bootstrap, topic))
