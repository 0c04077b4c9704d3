"""Raw producer against a real broker: pipelined rounds, the probe of a new partition, new producer ids."""

from __future__ import annotations

import pytest

from mm2py.client.cluster import ClusterClient
from mm2py.client.errors import ResendRefusedError
from mm2py.client.producer import ProduceError, ProducerConfig, RawProducer
from mm2py.client.producer.pipeline import SHARED_PASS_BYTES
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.record_codec import Record, build_batch
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from tests.support.brokers import BASE_TS, create_topic, read_all, unique
from tests.support.cut_proxy import CutProxy, ProxiedFactory

pytestmark = pytest.mark.integration


def small(tag: str) -> RecordBatch:
    return RecordBatch(build_batch([Record(0, 0, b"k", tag.encode())], base_timestamp=BASE_TS))


async def test_pipelined_produce_returns_a_prefix_per_partition_after_a_rejected_batch(
    west: KafkaCluster, dst: ClusterClient
) -> None:
    """Five rounds in flight; partition A's second batch is too large for the topic. A keeps only
    its first batch (the later ones are refused as out of sequence), B gets all of its batches, and
    A's sequence stays usable for what comes next."""
    topic = create_topic(west.bootstrap, unique("window"), partitions=2,
                         config={"max.message.bytes": "3000"})
    a, b = TopicPartition(topic, 0), TopicPartition(topic, 1)

    big = RecordBatch(build_batch([Record(0, 0, b"k", b"x" * 6000)], base_timestamp=BASE_TS))
    producer = RawProducer(dst)
    items = [(a, small("a0")), (a, big), (a, small("a2")), (a, small("a3")),
             (b, small("b0")), (b, small("b1")), (b, small("b2")), (b, small("b3"))]
    with pytest.raises(ProduceError) as err:
        await producer.produce(items)
    assert err.value.offsets == [0, -1, -1, -1, 0, 1, 2, 3]
    # A continues from its last acknowledged batch with a consistent sequence
    assert await producer.produce([(a, small("a2")), (a, small("a3"))]) == [1, 2]
    got = read_all(west.bootstrap, topic)
    assert [(r.partition, r.value) for r in got if r.partition == 0] == [(0, b"a0"), (0, b"a2"), (0, b"a3")]
    assert [r.value for r in got if r.partition == 1] == [b"b0", b"b1", b"b2", b"b3"]


async def test_pipelined_produce_never_appends_past_a_rejected_first_batch(
    west: KafkaCluster, dst: ClusterClient
) -> None:
    """The broker accepts any sequence number from a producer it does not know yet on a partition
    (ProducerAppendInfo.checkSequence), so batches pipelined behind a partition's refused first
    batch would be appended out of order. The producer probes an unconfirmed partition with one
    batch first: nothing lands after the refused batch, and the later retry lands in order."""
    topic = create_topic(west.bootstrap, unique("probe"), partitions=2,
                         config={"max.message.bytes": "3000"})
    a, b = TopicPartition(topic, 0), TopicPartition(topic, 1)

    big = RecordBatch(build_batch([Record(0, 0, b"k", b"x" * 6000)], base_timestamp=BASE_TS))
    producer = RawProducer(dst)
    items = [(a, big), (a, small("a1")), (a, small("a2")), (b, small("b0")), (b, small("b1"))]
    with pytest.raises(ProduceError) as err:
        await producer.produce(items)
    # B is unaffected: its first batch probes, its second is pipelined after the ack
    assert err.value.offsets == [-1, -1, -1, 0, 1]
    assert (await dst.list_offsets([a]))[a] == 0, "a batch behind the refused one was appended"
    # once the first batch of a partition is acknowledged, its later batches are pipelined
    assert await producer.produce([(a, small("a1")), (a, small("a2")), (a, small("a3"))]) == [0, 1, 2]
    assert await producer.produce([(b, small("b2"))]) == [2]
    got = read_all(west.bootstrap, topic)
    assert [r.value for r in got if r.partition == 0] == [b"a1", b"a2", b"a3"]


async def test_a_new_producer_id_resends_only_what_the_broker_refused(
    west: KafkaCluster, dst: ClusterClient
) -> None:
    """One partition of a round is refused as out of sequence (our state and the broker's disagree,
    simulated by skipping sequence numbers) while the other is appended. The producer takes a new
    id and sends again only the refused batch: the appended one must not land twice."""
    topic = create_topic(west.bootstrap, unique("reid"), partitions=2)
    a, b = TopicPartition(topic, 0), TopicPartition(topic, 1)

    producer = RawProducer(dst)
    assert await producer.produce([(a, small("a0")), (b, small("b0"))]) == [0, 0]
    first_id = producer.producer_id
    producer.set_sequence(a, producer.sequence(a) + 7)
    assert await producer.produce([(a, small("a1")), (b, small("b1"))]) == [1, 1]
    assert producer.producer_id != first_id
    got = read_all(west.bootstrap, topic)
    assert [r.value for r in got if r.partition == 0] == [b"a0", b"a1"]
    assert [r.value for r in got if r.partition == 1] == [b"b0", b"b1"]


async def test_two_connections_per_broker_keep_each_partitions_order(
    west: KafkaCluster, dst: ClusterClient
) -> None:
    """With two connections to the broker the partitions are dealt to both (batches large enough
    not to share one request: SHARE); ten batches of each of four partitions, pipelined, land in
    order and once, each at the offset it was acknowledged at."""
    topic = create_topic(west.bootstrap, unique("conns"), partitions=4)
    parts = [TopicPartition(topic, p) for p in range(4)]
    producer = RawProducer(dst, ProducerConfig(connections_per_broker=2))
    pad = b"k" * SHARED_PASS_BYTES  # in the key: the values are what the check below reads

    def large(tag: str) -> RecordBatch:
        return RecordBatch(build_batch([Record(0, 0, pad, tag.encode())], base_timestamp=BASE_TS))

    items = [(tp, large(f"{tp.partition}-{i}")) for i in range(10) for tp in parts]
    assert await producer.produce(items) == [i for i in range(10) for _ in parts]
    leader = dst.leader_of(parts[0])
    assert {slot for node, slot in dst._conns if node == leader} == {0, 1}
    got = read_all(west.bootstrap, topic)
    for tp in parts:
        assert [(r.offset, r.value) for r in got if r.partition == tp.partition] == [
            (i, f"{tp.partition}-{i}".encode()) for i in range(10)]
    await producer.close()


@pytest.mark.parametrize("window", [5, 10])
async def test_a_connection_cut_with_the_window_in_flight_appends_nothing_twice(
    west: KafkaCluster, window: int
) -> None:
    """The connection to the broker is cut after it handled a whole window of a partition's
    batches, none of them answered, and the producer sends them again. With five in flight the
    broker remembers them all and answers the re-sends as duplicates; with ten it remembers the
    last five only and refuses the first re-sent batch: ResendRefusedError, no new producer id,
    nothing appended twice. Either way the partition holds every batch once."""
    topic = create_topic(west.bootstrap, unique("cut"), partitions=1)
    tp = TopicPartition(topic, 0)
    host, _, port = west.bootstrap.rpartition(":")
    proxy = CutProxy(host, int(port))
    await proxy.start()
    cluster = ClusterClient(west.bootstrap)
    cluster._factory = ProxiedFactory(proxy)
    await cluster.start()
    producer = RawProducer(cluster, ProducerConfig(max_in_flight=window))
    try:
        assert await producer.produce([(tp, small("a0"))]) == [0]
        pid = producer.producer_id
        items = [(tp, small(f"a{i}")) for i in range(1, window + 1)]
        proxy.cut_after(window)  # the call sends them again itself after the connection is lost
        if window <= 5:
            assert await producer.produce(items) == list(range(1, window + 1))
        else:
            with pytest.raises(ProduceError) as err:
                await producer.produce(items)
            assert isinstance(err.value.cause, ResendRefusedError), err.value
            assert err.value.offsets == [-1] * window
        assert proxy.cuts == 1 and producer.producer_id == pid
        got = read_all(west.bootstrap, topic)
        assert [r.value for r in got] == [f"a{i}".encode() for i in range(window + 1)]
    finally:
        await producer.close()
        await cluster.close()
        await proxy.close()
