"""Raw client against real brokers: fetch raw batches, produce them raw, read back with librdkafka."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Producer

from mm2py.client.cluster import EARLIEST, LATEST, ClientConfig, ClusterClient
from mm2py.client.errors import ConnectionLostError
from mm2py.client.fetcher import FetcherConfig, RawFetcher
from mm2py.client.producer import ProducerConfig, RawProducer
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.api import ApiKey, ProduceTopicRequest, decode_produce_response, encode_produce_request
from mm2py.protocol.api_fetch import READ_COMMITTED, READ_UNCOMMITTED
from mm2py.protocol.batch_edit import for_produce, needs_rebuild
from mm2py.protocol.compression import Codec
from mm2py.protocol.errors_codes import NONE
from mm2py.protocol.record_codec import Record, build_batch, decode_records
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from tests.support.brokers import (
    BASE_TS,
    CODECS,
    Rec,
    admin,
    create_topic,
    make_records,
    produce_records,
    read_all,
    unique,
)

pytestmark = pytest.mark.integration


async def fetch_batches(
    cluster: ClusterClient, tp: TopicPartition, start: int = 0, *, isolation: int = READ_COMMITTED
) -> list[RecordBatch]:
    """Every batch from ``start`` up to the partition's end (LSO for read_committed)."""
    fetcher = RawFetcher(cluster, FetcherConfig(isolation_level=isolation, partition_max_bytes=64 * 1024))
    out: list[RecordBatch] = []
    pos = start
    for _ in range(1000):
        res = (await fetcher.fetch({tp: pos}))[tp]
        assert res.error_code == NONE, res.error_name
        out.extend(RecordBatch(bytes(b)) for b in res.batches)
        pos = res.next_offset
        end = res.last_stable_offset if isolation == READ_COMMITTED else res.high_watermark
        if pos >= end:
            return out
    raise AssertionError("fetch did not reach the end")


def records_of(batches: list[RecordBatch]) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for b in batches:
        for r in decode_records(b):
            out.append(
                (
                    b.base_offset + r.offset_delta,
                    r.key,
                    r.value,
                    r.headers,
                    b.base_timestamp + r.timestamp_delta,
                )
            )
    return out


def contents(recs: list[Rec]) -> list[tuple[object, ...]]:
    return [r.content() for r in recs]


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("codec", CODECS)
async def test_raw_mirror_roundtrip(
    east: KafkaCluster,
    west: KafkaCluster,
    src: ClusterClient,
    dst: ClusterClient,
    codec: str,
    idempotent: bool,
) -> None:
    topic = create_topic(east.bootstrap, unique(f"src-{codec}"))
    target = create_topic(west.bootstrap, unique(f"dst-{codec}"))
    records = make_records(300, partition=0, tag=codec)
    produce_records(east.bootstrap, topic, records, compression=codec, idempotent=idempotent,
                    extra={"batch.num.messages": 40})  # fmt: skip
    tp, ttp = TopicPartition(topic, 0), TopicPartition(target, 0)

    source_batches = await fetch_batches(src, tp)
    assert len(source_batches) > 1
    assert sum(b.records_count for b in source_batches) == len(records)
    # librdkafka sends a batch uncompressed when the codec would not shrink it (a small batch on a
    # loaded host: G22 in docs/testing.md); the codec's batches must be there, and the rest plain
    codecs = [b.codec for b in source_batches]
    assert Codec[codec.upper()] in codecs and set(codecs) <= {Codec[codec.upper()], Codec.NONE}, codecs
    assert all((b.producer_id >= 0) == idempotent for b in source_batches)

    # the plain (non-idempotent) mode: the broker sees the source bytes minus producer state
    plain = RawProducer(dst, ProducerConfig(idempotent=False))
    offsets = await plain.produce([(ttp, b) for b in source_batches])
    assert offsets == [b.base_offset for b in source_batches]  # same numbering as the source

    got = read_all(west.bootstrap, target, expect=len(records))
    assert contents(got) == contents(records)
    assert [r.offset for r in got] == list(range(len(records)))

    target_batches = await fetch_batches(dst, ttp)
    assert len(target_batches) == len(source_batches)
    for s, t in zip(source_batches, target_batches, strict=True):
        assert t.base_offset == s.base_offset
        assert t.crc_ok()
        if not idempotent:
            # identical bytes apart from partitionLeaderEpoch: same length, magic, CRC, records
            assert bytes(t.buf[8:12]) == bytes(s.buf[8:12])
            assert bytes(t.buf[16:]) == bytes(s.buf[16:])
        else:
            assert (t.producer_id, t.producer_epoch, t.base_sequence) == (-1, -1, -1)
            assert bytes(t.buf[21:43]) == bytes(s.buf[21:43])  # attributes..maxTimestamp
            assert bytes(t.buf[57:]) == bytes(s.buf[57:])  # recordsCount + compressed records


async def producer_unlike(dst: ClusterClient, source_pids: set[int]) -> RawProducer:
    """A raw producer whose id on the target differs from the source batches' ids. The two
    clusters number producer ids independently, so they may coincide; a coincidence would let
    a producer that kept the source's id pass for one that stamps its own."""
    while True:
        producer = RawProducer(dst)
        await producer.state.ensure()
        if producer.producer_id not in source_pids:
            return producer
        await producer.close()


async def test_idempotent_producer_stamps_its_own_sequences_and_dedupes_retries(
    east: KafkaCluster, west: KafkaCluster, src: ClusterClient, dst: ClusterClient
) -> None:
    topic = create_topic(east.bootstrap, unique("idem-src"), partitions=1)
    target = create_topic(west.bootstrap, unique("idem-dst"), partitions=1)
    produce_records(east.bootstrap, topic, make_records(300), compression="zstd", linger_ms=0,
                    extra={"batch.num.messages": 50})
    source_batches = await fetch_batches(src, TopicPartition(topic, 0))
    ttp = TopicPartition(target, 0)
    producer = await producer_unlike(dst, {b.producer_id for b in source_batches})
    offsets = await producer.produce([(ttp, b) for b in source_batches])
    assert offsets == [b.base_offset for b in source_batches]
    target_batches = await fetch_batches(dst, ttp)
    seq = 0
    for s, t in zip(source_batches, target_batches, strict=True):
        assert (t.producer_id, t.producer_epoch) == (producer.producer_id, producer.producer_epoch)
        assert t.producer_id >= 0 and t.producer_id != s.producer_id
        assert t.base_sequence == seq
        seq += t.records_count
        assert bytes(t.buf[21:43]) == bytes(s.buf[21:43]) and bytes(t.buf[57:]) == bytes(s.buf[57:])
    # a retry of a request whose first attempt was appended: the broker recognises the sequence
    last = source_batches[-1]
    resend = for_produce(last, producer.producer_id, producer.producer_epoch,
                         seq - last.records_count, verify=True)
    result = await producer.requests.send_wave({ttp: resend})
    assert result[ttp].error_code == 0
    assert result[ttp].base_offset == last.base_offset
    end = (await dst.list_offsets([ttp]))[ttp]
    assert end == sum(b.records_count for b in source_batches), "the retried batch was appended twice"


@pytest.mark.parametrize("codec", CODECS)
async def test_first_batch_crop(
    east: KafkaCluster,
    west: KafkaCluster,
    src: ClusterClient,
    dst: ClusterClient,
    codec: str,
) -> None:
    topic = create_topic(east.bootstrap, unique(f"crop-{codec}"))
    records = make_records(50, partition=0, tag="crop")
    produce_records(east.bootstrap, topic, records, compression=codec, linger_ms=500,
                    extra={"batch.num.messages": 1000})  # fmt: skip
    tp = TopicPartition(topic, 0)
    whole = await fetch_batches(src, tp)
    assert len(whole) == 1, "test needs all records in one batch"
    for start in (1, 17, 49):
        batches = await fetch_batches(src, tp, start)
        assert batches[0].base_offset == start
        got = records_of(batches)
        assert [g[0] for g in got] == list(range(start, 50))
        assert [g[1:] for g in got] == [(r.key, r.value, r.headers, r.timestamp) for r in records[start:]]
    # the cropped batch is accepted by a broker and reads back as exactly the kept records
    target = create_topic(west.bootstrap, unique("crop-dst"))
    batches = await fetch_batches(src, tp, 17)
    await RawProducer(dst).produce([(TopicPartition(target, 0), b) for b in batches])
    assert contents(read_all(west.bootstrap, target, expect=33)) == contents(records[17:])


def _transactional_writes(bootstrap: str, topic: str) -> list[Rec]:
    """Committed, aborted, committed transactions plus interleaved plain writes; returns the
    records a read_committed consumer must see, in order."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx"), "linger.ms": 5})
    p.init_transactions(30)
    committed: list[Rec] = []
    for i, commit in enumerate([True, False, True, False, True]):
        recs = make_records(20, partition=0, start_ts=BASE_TS + i * 100, tag=f"tx{i}")
        p.begin_transaction()
        for r in recs:
            p.produce(
                topic, r.value, r.key, partition=0, timestamp=r.timestamp, headers=list(r.headers) or None
            )
        p.flush(30)
        if commit:
            p.commit_transaction(30)
            committed.extend(recs)
        else:
            p.abort_transaction(30)
    return committed


async def test_transactions_only_committed(
    east: KafkaCluster, west: KafkaCluster, src: ClusterClient, dst: ClusterClient
) -> None:
    topic = create_topic(east.bootstrap, unique("txn"))
    committed = _transactional_writes(east.bootstrap, topic)
    tp = TopicPartition(topic, 0)
    # Transaction markers are written asynchronously after commit: wait until LSO == HW.
    for _ in range(100):
        lso = await src.list_offsets([tp], LATEST, isolation_level=READ_COMMITTED)
        if lso == await src.list_offsets([tp], LATEST):
            break
        await asyncio.sleep(0.1)

    batches = await fetch_batches(src, tp)
    assert batches and not any(b.is_control for b in batches)
    assert all(b.is_transactional for b in batches)
    assert [g[1:] for g in records_of(batches)] == [
        (r.key, r.value, r.headers, r.timestamp) for r in committed
    ]

    uncommitted = await fetch_batches(src, tp, isolation=READ_UNCOMMITTED)
    assert not any(b.is_control for b in uncommitted)
    assert sum(b.records_count for b in uncommitted) == 100  # aborted data visible, markers not

    target = create_topic(west.bootstrap, unique("txn-dst"))
    ttp = TopicPartition(target, 0)
    producer = await producer_unlike(dst, {b.producer_id for b in batches})
    offsets = await producer.produce([(ttp, b) for b in batches])
    assert len(offsets) == len(batches)
    assert contents(read_all(west.bootstrap, target, expect=len(committed))) == contents(committed)
    source_pids = {b.producer_id for b in batches}
    for t in await fetch_batches(dst, ttp):
        # the source's transactional producer state is gone: our own idempotent id replaces it
        assert not t.is_transactional and t.producer_id == producer.producer_id
        assert t.producer_id not in source_pids


async def test_gapped_batch_rejected_raw_accepted_after_rebuild(
    west: KafkaCluster, dst: ClusterClient
) -> None:
    target = create_topic(west.bootstrap, unique("gap"))
    tp = TopicPartition(target, 0)
    recs = [Record(0, 0, b"k0", b"v0"), Record(2, 5, b"k2", b"v2", (("h", b"x"),)), Record(5, 9, None, b"v5")]
    for codec in (Codec.NONE, Codec.ZSTD):
        gapped = RecordBatch(build_batch(recs, codec=codec, base_timestamp=BASE_TS))
        assert needs_rebuild(gapped)
        # Sent as is, the broker refuses it.
        await dst.ensure_topics([target])
        leader = dst.leader_of(tp)
        assert leader is not None
        conn = await dst.connection(leader)
        version = dst.version_for(conn, ApiKey.PRODUCE, 12)
        body = encode_produce_request(version, [ProduceTopicRequest(target, [(0, bytes(gapped))])])
        resp = await conn.request(ApiKey.PRODUCE, version, body, decode_produce_response)
        assert resp.partitions[0].error_code != NONE
        # The producer rebuilds it and the broker accepts it.
        await RawProducer(dst).send(tp, gapped)
    got = read_all(west.bootstrap, target, expect=6)
    expected = [(b"k0", b"v0", (), BASE_TS), (b"k2", b"v2", (("h", b"x"),), BASE_TS + 5),
                (None, b"v5", (), BASE_TS + 9)] * 2  # fmt: skip
    assert [r.content() for r in got] == expected
    assert [r.offset for r in got] == list(range(6))


async def test_produce_waits_for_topic_being_created(
    west: KafkaCluster, dst: ClusterClient
) -> None:
    name = unique("late")
    tp = TopicPartition(name, 0)
    batch = build_batch([Record(0, 0, b"k", b"v")], base_timestamp=BASE_TS)

    async def create_later() -> None:
        await asyncio.sleep(1.0)
        await asyncio.to_thread(create_topic, west.bootstrap, name)

    creator = asyncio.create_task(create_later())
    started = time.monotonic()
    offset = await RawProducer(dst).send(tp, batch)
    await creator
    assert offset == 0
    assert time.monotonic() - started >= 1.0
    assert [r.value for r in read_all(west.bootstrap, name, expect=1)] == [b"v"]


async def test_stale_metadata_after_topic_recreated(west: KafkaCluster, dst: ClusterClient) -> None:
    name = create_topic(west.bootstrap, unique("recreate"))
    tp = TopicPartition(name, 0)
    producer = RawProducer(dst)
    batch = build_batch(
        [Record(0, 0, b"k", b"v1"), Record(1, 1, b"k", b"v2")], base_timestamp=BASE_TS
    )
    assert await producer.send(tp, batch) == 0
    assert await producer.send(tp, batch) == 2
    old_id = dst.topic_id(name)
    assert old_id is not None
    a = admin(west.bootstrap)
    a.delete_topics([name])[name].result(30)
    deadline = time.monotonic() + 30
    while True:  # deletion is asynchronous: recreate as soon as the broker allows it
        try:
            create_topic(west.bootstrap, name)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    assert dst.topic_id(name) == old_id  # the cache is stale now
    # produce and fetch both recover (new topic id / leader learnt from a metadata refresh)
    assert await producer.send(tp, batch) == 0
    assert dst.topic_id(name) not in (None, old_id)
    res = (await RawFetcher(dst).fetch({tp: 0}))[tp]
    assert res.error_code == NONE
    assert [r.value for b in res.batches for r in decode_records(b)] == [b"v1", b"v2"]


async def test_fetch_recovers_from_stale_leader(west: KafkaCluster, dst: ClusterClient) -> None:
    name = create_topic(west.bootstrap, unique("stale"))
    tp = TopicPartition(name, 0)
    await RawProducer(dst).send(tp, build_batch([Record(0, 0, None, b"x")], base_timestamp=BASE_TS))
    # Poison the cache: the leader is a broker id that does not exist.
    meta = dst.topics[name]
    meta.partitions[0] = type(meta.partitions[0])(0, 0, 4242, 0, (4242,), (4242,))
    res = (await RawFetcher(dst).fetch({tp: 0}))[tp]
    assert res.error_code == NONE and res.batches[0].records_count == 1
    assert dst.leader_of(tp) != 4242


@pytest.mark.parametrize(("fetch_v", "produce_v"), [(4, 3), (7, 5), (11, 8), (12, 9), (13, 12), (16, 13)])
async def test_protocol_versions_against_broker(
    west: KafkaCluster, fetch_v: int, produce_v: int
) -> None:
    caps: dict[int, int] = {
        ApiKey.FETCH: fetch_v,
        ApiKey.PRODUCE: produce_v,
        ApiKey.METADATA: 4 if fetch_v < 12 else 12,
    }
    async with ClusterClient(west.bootstrap, ClientConfig(max_versions=caps)) as c:
        name = create_topic(west.bootstrap, unique(f"v{fetch_v}"), partitions=2)
        batch = build_batch(
            [Record(i, i, b"k%d" % i, b"v") for i in range(3)],
            codec=Codec.LZ4,
            base_timestamp=BASE_TS,
        )
        items = [(TopicPartition(name, p), batch) for p in (0, 1) for _ in range(2)]
        assert await RawProducer(c).produce(items) == [0, 3, 0, 3]
        res = await RawFetcher(c).fetch({TopicPartition(name, 0): 0, TopicPartition(name, 1): 4})
        p0, p1 = res[TopicPartition(name, 0)], res[TopicPartition(name, 1)]
        assert [b.base_offset for b in p0.batches] == [0, 3] and p0.high_watermark == 6
        assert [b.base_offset for b in p1.batches] == [4]  # cropped
        assert await c.list_offsets([TopicPartition(name, 0)], EARLIEST) == {TopicPartition(name, 0): 0}
        assert await c.list_offsets([TopicPartition(name, 1)], LATEST) == {TopicPartition(name, 1): 6}


async def test_pipelining_and_connection_loss(west: KafkaCluster, dst: ClusterClient) -> None:
    name = create_topic(west.bootstrap, unique("pipe"), partitions=4)
    tps = [TopicPartition(name, p) for p in range(4)]
    batch = build_batch([Record(0, 0, None, b"v")], base_timestamp=BASE_TS)
    producer = RawProducer(dst)
    results = await asyncio.gather(*(producer.send(tps[i % 4], batch) for i in range(40)))
    assert sorted(results) == sorted(list(range(10)) * 4)
    # a long-polling fetch in flight fails fast with a retriable error when the socket goes away
    leader = dst.leader_of(tps[0])
    assert leader is not None
    conn = await dst.connection(leader)
    fetcher = RawFetcher(dst, FetcherConfig(max_wait_ms=10_000, retry_timeout_s=0.001))
    task = asyncio.create_task(fetcher.fetch({tps[0]: 10}))
    await asyncio.sleep(0.3)
    assert conn.in_flight == 1
    started = time.monotonic()
    await conn.close()
    with pytest.raises(ConnectionLostError):
        await task
    assert time.monotonic() - started < 5
    # the cluster client reconnects on next use
    assert (await fetcher.fetch({tps[0]: 0}))[tps[0]].batches
