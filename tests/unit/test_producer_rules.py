"""The raw producer's rules, checked against an in-memory fake of one broker at the client's seam.

The fake stands in for the broker *connection* (the producer's own code runs unchanged: rounds,
probe, window, routing through ``ClusterClient.for_leaders``, new producer ids). It keeps the part of
a broker's idempotence rules the producer relies on (ProducerAppendInfo.checkSequence): a producer
it does not know on a partition may start at any sequence; a known one must continue exactly, and a
repeat of one of its last five batches is answered with the original offset instead of being
appended again. Real-broker tests of the same rules are in tests/integration/test_raw_producer.py.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from mm2py.client.cluster import ClusterClient
from mm2py.client.connection import ConnectionConfig
from mm2py.client.errors import RequestTimeoutError
from mm2py.client.producer import ProduceError, RawProducer
from mm2py.protocol.api import (
    ApiKey,
    BrokerMetadata,
    InitProducerIdResponse,
    MetadataPartition,
    MetadataResponse,
    MetadataTopic,
    ProducePartitionResponse,
    ProduceResponse,
)
from mm2py.protocol.errors_codes import (
    MESSAGE_TOO_LARGE,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    UNKNOWN_PRODUCER_ID,
)
from mm2py.protocol.record_codec import Record, build_batch, decode_records
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from mm2py.protocol.wire import Reader

TS = 1_700_000_000_000
TOPIC = "t"
A, B = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
PRODUCE_VERSION = 8  # not flexible: the fake reads the request body with a few lines


def batch(value: str, size: int = 0) -> RecordBatch:
    return RecordBatch(build_batch([Record(0, 0, b"k", value.encode() + b"." * size)], base_timestamp=TS))


@dataclass
class Appended:
    producer_id: int
    sequence: int
    value: str


@dataclass
class PartitionLog:
    entries: list[Appended] = field(default_factory=list)
    #: producer id -> (next expected sequence, its last five batches as (sequence, base offset))
    producers: dict[int, tuple[int, deque[tuple[int, int]]]] = field(default_factory=dict)


class FakeBroker:
    """One broker leading every partition of ``TOPIC``; answers Metadata, InitProducerId, Produce."""

    def __init__(self, partitions: int = 2, max_batch_bytes: int = 1000) -> None:
        self.partitions = partitions
        self.max_batch_bytes = max_batch_bytes
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.next_producer_id = 1
        #: (partition, producer id) pairs the broker has forgotten: answered ``forgotten_code``
        self.forgotten: set[tuple[TopicPartition, int]] = set()
        self.forgotten_code = UNKNOWN_PRODUCER_ID
        #: a request carrying a batch with this value is appended but its response never comes
        self.lose_response_of: str | None = None
        #: what happened, in order: ("recv", request number, [(tp, value, pid, seq)]) / ("answer", n)
        self.events: list[tuple[Any, ...]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    def values(self, tp: TopicPartition) -> list[str]:
        return [e.value for e in self.logs.get(tp, PartitionLog()).entries]

    def requests_with(self, value: str) -> list[int]:
        return [e[1] for e in self.events if e[0] == "recv" and any(v == value for _, v, _, _ in e[2])]

    def answered_before(self, n: int, m: int) -> bool:
        """Whether request n was answered before request m arrived."""
        return self.events.index(("answer", n)) < self.events.index(("recv", m, self._sent(m)))

    def _sent(self, m: int) -> list[tuple[TopicPartition, str, int, int]]:
        return next(e[2] for e in self.events if e[0] == "recv" and e[1] == m)

    # ----------------------------------------------------------------------------- requests
    def metadata(self) -> MetadataResponse:
        parts = tuple(MetadataPartition(NONE, p, 1, 0, (1,), (1,)) for p in range(self.partitions))
        return MetadataResponse(0, {1: BrokerMetadata(1, "fake", 9092)}, "fake-cluster", 1,
                                (MetadataTopic(NONE, TOPIC, None, False, parts),))

    def init_producer_id(self) -> InitProducerIdResponse:
        pid, self.next_producer_id = self.next_producer_id, self.next_producer_id + 1
        return InitProducerIdResponse(0, NONE, pid, 0)

    def handle_produce(self, n: int, body: bytes) -> tuple[ProduceResponse, bool]:
        """Appends in arrival order (as a broker handles one connection's requests)."""
        r = Reader(body)
        r.nullable_string(False)
        r.int16()
        r.int32()
        got: list[ProducePartitionResponse] = []
        seen: list[tuple[TopicPartition, str, int, int]] = []
        for _ in range(r.array_len(False)):
            topic = r.string(False)
            for _ in range(r.array_len(False)):
                tp = TopicPartition(topic, r.int32())
                data = r.nullable_bytes(False)
                assert data is not None
                b = RecordBatch(bytes(data))
                value = (decode_records(b)[0].value or b"").decode().rstrip(".")
                seen.append((tp, value, b.producer_id, b.base_sequence))
                code, offset = self._append(tp, b, value)
                got.append(ProducePartitionResponse(topic, None, tp.partition, code, offset, -1, -1))
        self.events.append(("recv", n, seen))
        return ProduceResponse(got, 0), any(v == self.lose_response_of for _, v, _, _ in seen)

    def _append(self, tp: TopicPartition, b: RecordBatch, value: str) -> tuple[int, int]:
        log = self.logs.setdefault(tp, PartitionLog())
        pid, seq = b.producer_id, b.base_sequence
        if b.size > self.max_batch_bytes:
            return MESSAGE_TOO_LARGE, -1
        if (tp, pid) in self.forgotten:
            return self.forgotten_code, -1
        known = log.producers.get(pid)
        if known is not None:
            expected, recent = known
            for s, offset in recent:
                if s == seq:
                    return NONE, offset  # a repeat of a recent batch: not appended twice
            if seq != expected:
                return OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        base = len(log.entries)
        log.entries.append(Appended(pid, seq, value))
        recent = known[1] if known is not None else deque(maxlen=5)
        recent.append((seq, base))
        log.producers[pid] = (seq + b.records_count, recent)
        return NONE, base


class FakeConnection:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.config = ConnectionConfig(request_timeout_s=5.0)
        self.connected = True
        self._count = 0

    def version_for(self, api_key: int, max_version: int | None = None) -> int:
        return PRODUCE_VERSION if api_key == ApiKey.PRODUCE else 4

    async def request(self, api_key: int, version: int, body: bytes, parser: Callable[..., Any],
                      timeout: float | None = None) -> Any:
        fb = self.broker
        if api_key == ApiKey.METADATA:
            return fb.metadata()
        if api_key == ApiKey.INIT_PRODUCER_ID:
            return fb.init_producer_id()
        assert (api_key, version) == (ApiKey.PRODUCE, PRODUCE_VERSION)
        self._count += 1
        n = self._count
        resp, lost = fb.handle_produce(n, body)  # before any await: handled in the order written
        fb.in_flight += 1
        fb.max_in_flight = max(fb.max_in_flight, fb.in_flight)
        await asyncio.sleep(0.01)
        fb.in_flight -= 1
        if lost:
            raise RequestTimeoutError(f"request {n} timed out (the broker did append it)")
        fb.events.append(("answer", n))
        return resp

    async def close(self) -> None:
        self.connected = False


class FakeFactory:
    def __init__(self, conn: FakeConnection) -> None:
        self.conn = conn

    async def connect(self, host: str, port: int, node_id: int = -1) -> FakeConnection:
        return self.conn


async def producer_on(broker: FakeBroker) -> RawProducer:
    cluster = ClusterClient("fake:9092")
    cluster._factory = FakeFactory(FakeConnection(broker))  # type: ignore[assignment]
    await cluster.start()
    return RawProducer(cluster)


# ---------------------------------------------------------------------------------- rules


async def test_after_a_failure_mid_window_only_the_acknowledged_prefix_is_reported() -> None:
    """A's second batch is refused mid-window; the broker refuses A's later batches as out of
    sequence and appends all of B's. Reported: A's prefix (one batch), all of B, in order; A's
    sequence continues right after the prefix."""
    fb = FakeBroker()
    producer = await producer_on(fb)
    assert await producer.produce([(A, batch("a0")), (B, batch("b0"))]) == [0, 0]  # both confirmed
    items = [(A, batch("a1")), (A, batch("a2", size=2000)), (A, batch("a3")), (A, batch("a4")),
             (B, batch("b1")), (B, batch("b2")), (B, batch("b3")), (B, batch("b4"))]
    with pytest.raises(ProduceError) as err:
        await producer.produce(items)
    assert fb.max_in_flight > 1, "the window did not pipeline"
    assert err.value.offsets == [1, -1, -1, -1, 1, 2, 3, 4]
    assert fb.values(A) == ["a0", "a1"] and fb.values(B) == ["b0", "b1", "b2", "b3", "b4"]
    assert await producer.produce([(A, batch("a2")), (A, batch("a3"))]) == [2, 3]
    assert fb.values(A) == ["a0", "a1", "a2", "a3"]


async def test_a_failure_only_we_saw_reports_the_prefix_and_the_resend_is_not_appended_twice() -> None:
    """The response of the round carrying a2/b2 is lost although the broker appended it (and the
    rounds after it). Reported as delivered: only what came back acknowledged before the loss. The
    rest, sent again with the same sequences, is recognised by the broker: nothing twice."""
    fb = FakeBroker()
    producer = await producer_on(fb)
    assert await producer.produce([(A, batch("a0")), (B, batch("b0"))]) == [0, 0]
    fb.lose_response_of = "a2"
    items = [(A, batch("a1")), (A, batch("a2")), (A, batch("a3")), (B, batch("b1")), (B, batch("b2"))]
    with pytest.raises(ProduceError) as err:
        await producer.produce(items)
    assert err.value.offsets == [1, -1, -1, 1, -1]
    assert fb.values(A) == ["a0", "a1", "a2", "a3"]  # the broker has more than was reported
    fb.lose_response_of = None
    rest = [(A, batch("a2")), (A, batch("a3")), (B, batch("b2"))]
    assert await producer.produce(rest) == [2, 3, 2]
    assert fb.values(A) == ["a0", "a1", "a2", "a3"] and fb.values(B) == ["b0", "b1", "b2"]


async def test_an_unconfirmed_partition_sends_its_first_batch_alone_before_pipelining() -> None:
    """A new producer: the first request carries only the first batch of each partition and is
    answered before any later batch of those partitions is sent. A's first batch is refused (too
    large); a broker that does not know the producer would take ANY sequence, so nothing after it
    may have been sent."""
    fb = FakeBroker()
    producer = await producer_on(fb)
    items = [(A, batch("a0", size=2000)), (A, batch("a1")), (A, batch("a2")),
             (B, batch("b0")), (B, batch("b1")), (B, batch("b2"))]
    with pytest.raises(ProduceError) as err:
        await producer.produce(items)
    assert err.value.offsets == [-1, -1, -1, 0, 1, 2]
    assert fb.values(A) == [], "a batch behind the refused first batch was appended"
    assert fb.requests_with("a1") == [] and fb.requests_with("a2") == []
    (probe,) = fb.requests_with("b0")
    assert [v for _, v, _, _ in fb._sent(probe)] == ["a0", "b0"]
    (later,) = fb.requests_with("b1")
    assert fb.answered_before(probe, later), "B's second batch was sent before its probe was answered"
    # now confirmed: A's batches are pipelined after one acknowledged probe, in order
    assert await producer.produce([(A, batch("a1")), (A, batch("a2")), (A, batch("a3"))]) == [0, 1, 2]
    assert fb.values(A) == ["a1", "a2", "a3"]


async def test_a_forgotten_producer_takes_a_new_id_and_resends_only_what_was_refused() -> None:
    """The broker forgets our producer on A (UNKNOWN_PRODUCER_ID) while B appends the same round.
    The producer takes a new id, sends again only A's batch with sequence 0, and every partition's
    sequence starts again at 0 under the new id."""
    fb = FakeBroker()
    producer = await producer_on(fb)
    assert await producer.produce([(A, batch("a0")), (B, batch("b0"))]) == [0, 0]
    assert producer.producer_id == 1
    fb.forgotten.add((A, 1))
    assert await producer.produce([(A, batch("a1")), (B, batch("b1"))]) == [1, 1]
    assert producer.producer_id == 2
    assert fb.values(A) == ["a0", "a1"] and fb.values(B) == ["b0", "b1"]
    assert [(e.producer_id, e.sequence) for e in fb.logs[A].entries] == [(1, 0), (2, 0)]
    assert await producer.produce([(B, batch("b2"))]) == [2]
    assert [(e.producer_id, e.sequence) for e in fb.logs[B].entries] == [(1, 0), (1, 1), (2, 0)]


async def test_a_producer_refused_mid_window_is_reset_and_the_next_call_starts_over() -> None:
    """Pipelined batches on A are refused as out of sequence (the broker lost our state): the window
    reports nothing for A and drops the producer id; the next call takes a new id, probes A with
    sequence 0 first, then pipelines from there."""
    fb = FakeBroker()
    producer = await producer_on(fb)
    assert await producer.produce([(A, batch("a0"))]) == [0]
    fb.forgotten.add((A, 1))
    fb.forgotten_code = OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(ProduceError) as err:
        await producer.produce([(A, batch("a1")), (A, batch("a2"))])
    assert err.value.offsets == [-1, -1]
    assert producer.producer_id == -1, "the producer id the broker forgot was kept"
    fb.events.clear()
    assert await producer.produce([(A, batch("a1")), (A, batch("a2")), (A, batch("a3"))]) == [1, 2, 3]
    assert [(e.producer_id, e.sequence) for e in fb.logs[A].entries] == [(1, 0), (2, 0), (2, 1), (2, 2)]
    (probe,) = fb.requests_with("a1")
    (later,) = fb.requests_with("a2")
    assert fb.answered_before(probe, later), "pipelined on a partition the new producer id never wrote to"
