"""Mirroring from a source cluster with tiered storage (KIP-405), early segments remote-only.

The source is the session's ``east`` broker, which has remote log storage on (Kafka's own
LocalTieredStorage: a directory plays the object store). Its tiered topics have 64 KiB segments
and a tiny local retention, so within seconds their early segments exist only in remote storage:
the earliest offset is 0 while the earliest LOCAL offset (ListOffsets spec -4) is far above it,
and every fetch below that is a remote read. A broker serves those differently from local reads:
a segment at a time, remote data for one partition per Fetch request, and a remote batch larger
than the partition limit only to the first partition of a request. The target is the session's
plain ``west`` cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from mm2py.client.cluster import EARLIEST, ClusterClient
from mm2py.client.fetcher import FetcherConfig, RawFetcher
from mm2py.config.filters import CONFIG_PROPERTIES_EXCLUDE_DEFAULT
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.stores.positions import PositionStore
from tests.support.brokers import (
    BASE_TS,
    CODECS,
    BackgroundWorker,
    admin,
    by_partition,
    create_topic,
    end_offsets,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    read_syncs,
    topic_names,
    unique,
    wait_until,
)
from tests.support.tiered_storage import EARLIEST_LOCAL, tiered_topic_config

pytestmark = pytest.mark.integration

SOURCE, TARGET = "tiered", "west"
#: a producer batch must fit in one (64 KiB) segment, or the broker refuses it
SMALL_BATCHES = {"batch.size": 16384}
#: a tiered topic's own settings: the plain target cluster would refuse remote.storage.enable
EXCLUDE = CONFIG_PROPERTIES_EXCLUDE_DEFAULT + r", remote\.storage\.enable, local\.retention\..*, internal\..*"


@pytest.fixture(scope="module")
def source(east: KafkaCluster) -> KafkaCluster:
    """The session's ``east``, which has remote storage on (its tiered topics opt in)."""
    return east


@pytest.fixture(scope="module")
def target(west: KafkaCluster) -> KafkaCluster:
    return west


def _offsets(bootstrap: str, tps: list[TopicPartition], spec: int) -> dict[TopicPartition, int]:
    async def run() -> dict[TopicPartition, int]:
        async with ClusterClient(bootstrap) as client:
            return await client.list_offsets(tps, spec)

    return asyncio.run(run())


def _wait_remote_only(source: KafkaCluster, tp: TopicPartition, below: int) -> int:
    """Wait until every offset below ``below`` is in remote storage only; the earliest local offset."""
    wait_until(lambda: _offsets(source.bootstrap, [tp], EARLIEST_LOCAL)[tp] >= below, 90, 0.5,
               f"{tp} remote-only below offset {below}")  # fmt: skip
    assert _offsets(source.bootstrap, [tp], EARLIEST)[tp] == 0, "the remote segments were deleted"
    return _offsets(source.bootstrap, [tp], EARLIEST_LOCAL)[tp]


def _config(source: KafkaCluster, target: KafkaCluster, topic: str, **flow: object) -> object:
    return mirror_config(
        {SOURCE: source.bootstrap, TARGET: target.bootstrap},
        {f"{SOURCE}->{TARGET}": {"topics": topic, "config.properties.exclude": EXCLUDE, **flow}},
    )


def _ends(target: KafkaCluster, topic: str) -> dict[int, int]:
    try:
        return end_offsets(target.bootstrap, topic) if topic in topic_names(target.bootstrap) else {}
    except KafkaException:  # a target topic just created may have no leader yet
        return {}


def _wait_mirrored(target: KafkaCluster, topic: str, ends: Mapping[int, int], timeout: float) -> None:
    wait_until(lambda: _ends(target, topic) == dict(ends), timeout, 0.5, f"{topic} mirrored up to {ends}")


def test_backfill_from_remote_only_segments_is_exact(source: KafkaCluster, target: KafkaCluster) -> None:
    topic = create_topic(source.bootstrap, unique("tier-backfill"), config=tiered_topic_config())
    sent = []
    for i, codec in enumerate(CODECS):
        records = make_records(3000, partition=0, start_ts=BASE_TS + 10_000 * i, tag=codec)
        produce_records(source.bootstrap, topic, records, compression=codec, extra=SMALL_BATCHES)
        sent += records
    tp = TopicPartition(topic, 0)
    local_start = _wait_remote_only(source, tp, len(sent) // 2)
    # at least the first half is remote-only; the broker may have tiered all of it by now (the
    # records' old timestamps breach the 1 ms local retention, so it may roll the active segment)
    assert len(sent) // 2 <= local_start <= len(sent)

    with BackgroundWorker(_config(source, target, topic, **{"offset.lag.max": 10})):
        _wait_mirrored(target, f"{SOURCE}.{topic}", {0: len(sent)}, 120)
    mirrored = read_all(target.bootstrap, f"{SOURCE}.{topic}")
    assert [r.content() for r in mirrored] == [r.content() for r in sent]
    assert [r.offset for r in mirrored] == list(range(len(sent)))

    # the offset syncs translate every source position exactly (no gaps: to the same offset)
    store = OffsetSyncStore()
    for sync in read_syncs(source.bootstrap, f"mm2-offset-syncs.{TARGET}.internal"):
        if sync.topic_partition.topic == topic:
            store.add(sync)
    for upstream in range(len(sent) + 1):
        assert store.translate(tp, upstream, downstream_end=len(sent)) == upstream, f"upstream {upstream}"


def _remote_batch(source: KafkaCluster, tp: TopicPartition, local_start: int) -> RecordBatch:
    """A batch of several records that lies wholly in remote storage (read remotely, too)."""

    async def run() -> list[RecordBatch]:
        async with ClusterClient(source.bootstrap) as client:
            return (await RawFetcher(client).fetch({tp: 0}))[tp].batches

    batches = [b for b in asyncio.run(run()) if b.next_offset <= local_start and b.records_count >= 3]
    assert batches, "no remote batch of several records"
    return batches[len(batches) // 2]


def test_mirror_starting_mid_batch_in_a_remote_segment_gets_exactly_the_rest(
    source: KafkaCluster, target: KafkaCluster
) -> None:
    topic = create_topic(source.bootstrap, unique("tier-crop"), config=tiered_topic_config())
    sent = make_records(4000, partition=0, tag="crop")
    produce_records(source.bootstrap, topic, sent, compression="zstd", linger_ms=50, extra=SMALL_BATCHES)
    tp = TopicPartition(topic, 0)
    local_start = _wait_remote_only(source, tp, len(sent) // 2)
    batch = _remote_batch(source, tp, local_start)
    start = batch.base_offset + batch.records_count // 2  # strictly inside the batch
    assert batch.base_offset < start <= batch.last_offset < local_start

    # the stored position (MM2's format: no target end) makes the task start there
    store = PositionStore(ClusterAdmin(TARGET, target.bootstrap), SOURCE, replication_factor=1)
    store.ensure_topic()
    store.commit({tp: Position(start, None)})
    store.close()
    with BackgroundWorker(_config(source, target, topic)):
        _wait_mirrored(target, f"{SOURCE}.{topic}", {0: len(sent) - start}, 120)
    mirrored = read_all(target.bootstrap, f"{SOURCE}.{topic}")
    assert [r.content() for r in mirrored] == [r.content() for r in sent[start:]]
    assert [r.offset for r in mirrored] == list(range(len(sent) - start))


def _set_remote_fetch_quota(source: KafkaCluster, bytes_per_second: int | None) -> None:
    """Throttle (or stop throttling) the broker's reads from remote storage (KIP-956, dynamic)."""
    op = AlterConfigOpType.SET if bytes_per_second is not None else AlterConfigOpType.DELETE
    entry = ConfigEntry("remote.log.manager.fetch.max.bytes.per.second", str(bytes_per_second or ""),
                        incremental_operation=op)  # fmt: skip
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])
    client = admin(source.bootstrap)
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def test_local_partition_keeps_flowing_while_another_backfills_from_remote(
    source: KafkaCluster, target: KafkaCluster
) -> None:
    topic = create_topic(source.bootstrap, unique("tier-live"), partitions=2, config=tiered_topic_config())
    backlog = make_records(8000, partition=0, tag="old")
    produce_records(source.bootstrap, topic, backlog, extra=SMALL_BATCHES)
    _wait_remote_only(source, TopicPartition(topic, 0), len(backlog) // 2)
    mirrored = f"{SOURCE}.{topic}"
    live = make_records(5, partition=1, start_ts=BASE_TS + 100_000, tag="live")

    # slow remote storage: the backfill of partition 0 takes many seconds
    _set_remote_fetch_quota(source, 40_000)
    try:
        with BackgroundWorker(_config(source, target, topic)):
            for i, record in enumerate(live):
                produce_records(source.bootstrap, topic, [record])
                wait_until(lambda n=i + 1: _ends(target, mirrored).get(1) == n, 20, 0.1,
                           f"live record {i} on the target")  # fmt: skip
            behind = _ends(target, mirrored)[0]
            assert behind < len(backlog), "partition 0 was done before the live records: nothing shown"
            _set_remote_fetch_quota(source, None)
            _wait_mirrored(target, mirrored, {0: len(backlog), 1: len(live)}, 120)
    finally:
        _set_remote_fetch_quota(source, None)
    got = by_partition(read_all(target.bootstrap, mirrored))
    assert got == by_partition(backlog + live)


def test_remote_partitions_behind_a_busy_local_one_take_turns(source: KafkaCluster) -> None:
    """Each remote partition's batches (16 KiB) exceed the partition limit (4 KiB): the broker returns
    one only to the first partition of a request; a local partition with data in every round must
    not keep the remote ones waiting forever."""
    topic = create_topic(source.bootstrap, unique("tier-turns"), partitions=3, config=tiered_topic_config())
    remote, local = [TopicPartition(topic, 0), TopicPartition(topic, 1)], TopicPartition(topic, 2)
    for tp in remote:
        produce_records(source.bootstrap, topic, make_records(3000, partition=tp.partition),
                        extra=SMALL_BATCHES)  # fmt: skip
        _wait_remote_only(source, tp, 1500)
    producer = Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 0})

    async def rounds() -> dict[TopicPartition, int]:
        served = dict.fromkeys(remote, 0)
        async with ClusterClient(source.bootstrap) as client:
            fetcher = RawFetcher(client, FetcherConfig(max_wait_ms=100, partition_max_bytes=4096))
            positions = {local: 0, **dict.fromkeys(remote, 0)}  # the local partition first
            for _ in range(20):
                producer.produce(topic, b"live", partition=local.partition)
                producer.flush(10)
                got = await fetcher.fetch(positions)
                assert got[local].batches, "the local partition has data in every round"
                for tp, fetched in got.items():
                    if tp in served and fetched.batches:
                        assert fetched.batches[0].size > 4096
                        served[tp] += 1
                    positions[tp] = max(positions[tp], fetched.next_offset)
        return served

    served = asyncio.run(rounds())
    assert all(n >= 5 for n in served.values()), f"rounds in which each remote partition got data: {served}"


def _remote_read_errors(source: KafkaCluster, tp: TopicPartition) -> int:
    text = source.nodes[0].log_file.read_text(errors="replace")
    return text.count(f"Error occurred while reading the remote data for {tp.topic}-{tp.partition}")


def test_failing_remote_reads_are_retried_slowly_and_block_nothing_else(
    source: KafkaCluster, target: KafkaCluster
) -> None:
    """Remote storage lost partition 0's old segments: the broker answers each fetch of them at once
    with UNKNOWN_SERVER_ERROR. The task neither skips them nor fetches them in a busy loop, and
    partition 1 keeps being mirrored."""
    topic = create_topic(source.bootstrap, unique("tier-lost"), partitions=2, config=tiered_topic_config())
    tp0 = TopicPartition(topic, 0)
    produce_records(source.bootstrap, topic, make_records(3000, partition=0), extra=SMALL_BATCHES)
    _wait_remote_only(source, tp0, 1500)
    lost = list((source.workdir / "remote").glob(f"kafka-tiered-storage/{topic}-0-*/*.log"))
    assert lost
    for segment in lost:
        segment.unlink()
    errors_before = _remote_read_errors(source, tp0)
    mirrored = f"{SOURCE}.{topic}"
    live = make_records(3, partition=1, tag="live")
    with BackgroundWorker(_config(source, target, topic)) as bg:
        produce_records(source.bootstrap, topic, live)
        _wait_mirrored(target, mirrored, {0: 0, 1: len(live)}, 30)
        time.sleep(4)
        tasks = bg.worker.flows[f"{SOURCE}->{TARGET}"].status()["tasks"]
    assert [t["state"] for t in tasks] == ["RUNNING"]
    assert _ends(target, mirrored) == {0: 0, 1: len(live)}, "lost offsets were skipped"
    failed_reads = _remote_read_errors(source, tp0) - errors_before
    assert 1 <= failed_reads <= 15, f"{failed_reads} failed remote reads: fetched in a busy loop"
