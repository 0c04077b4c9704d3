"""An in-memory fake of one broker at the raw producer's seam (its connection), for unit tests.

It keeps the part of a broker's idempotence rules the producer relies on
(ProducerAppendInfo.checkSequence): a producer it does not know on a partition may start at any
sequence; a known one must continue exactly, and a repeat of one of its last five batches is
answered with the original offset instead of being appended again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mm2py.client.cluster import ClusterClient
from mm2py.client.connection import ConnectionConfig
from mm2py.client.errors import ConnectionLostError, RequestTimeoutError
from mm2py.client.producer import ProducerConfig, RawProducer
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

__all__ = [
    "OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID", "A", "B", "FakeBroker", "batch", "producer_on",
]

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

    def __init__(self, partitions: int = 2, max_batch_bytes: int = 1000, answer_after: float = 0.01) -> None:
        self.partitions = partitions
        self.answer_after = answer_after  # s a Produce request waits for its answer
        self.max_batch_bytes = max_batch_bytes
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.next_producer_id = 1
        #: (partition, producer id) pairs the broker has forgotten: answered ``forgotten_code``
        self.forgotten: set[tuple[TopicPartition, int]] = set()
        self.forgotten_code = UNKNOWN_PRODUCER_ID
        #: the next request carrying a batch with this value is appended but its response never
        #: comes (once: the value is cleared)
        self.lose_response_of: str | None = None
        #: the lost response's time-out comes only once a request with this value arrived (the
        #: batches sent behind the lost one all reach the broker first, however slow the host)
        self.lost_answer_after: str | None = None
        #: the lost response's time-out comes only once every other request was answered (the
        #: producer has seen the batches behind the lost one acknowledged first)
        self.lost_answer_last = False
        #: the request whose lost answer's time-out is not raised yet: a Kafka broker answers the
        #: requests of a connection in order, so the later ones are answered after it (unless
        #: ``lost_answer_last``)
        self.lost_pending: int | None = None
        #: called when the lost response's time-out is raised (the producer has not reacted yet)
        self.on_lost_answer: Callable[[], None] | None = None
        #: the connection carrying a request with this value is cut once the broker handled that
        #: request (once): no request on it is answered, later ones are not handled
        self.cut_connection_at: str | None = None
        #: value -> error code every batch with that value is refused with (``refuse_once``: the
        #: first time it arrives)
        self.refuse: dict[str, int] = {}
        self.refuse_once: dict[str, int] = {}
        #: the next Produce answer asks for this throttle time (a quota, KIP-219), then 0 again
        self.throttle_next_ms = 0
        self.metadata_requests = 0
        #: batches answered as repeats of a recent batch (not appended again)
        self.duplicates = 0
        #: what happened, in order: ("recv", request number, [(tp, value, pid, seq)]) / ("answer", n)
        self.events: list[tuple[Any, ...]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        #: Produce answers wait until this many requests were in flight at once (then no more;
        #: 10 s at most): a test of how many requests go out together holds on a slow host
        self.hold_answers_until_in_flight: int | None = None
        #: ... and until one partition had this many batches in flight at once (a test of the
        #: producer's window: on a loaded host an answer let out early would shrink what it sees)
        self.hold_answers_until_partition_in_flight: int | None = None
        #: batches of one partition in flight at once (the producer's window), the most seen
        self.partition_in_flight: dict[TopicPartition, int] = {}
        self.max_partition_in_flight = 0
        self.requests = 0  # Produce requests received, over all connections
        #: Produce request number -> the connection (its number, from 1) it came on
        self.connection_of: dict[int, int] = {}
        self.connections = 0  # connections opened

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
        throttle, self.throttle_next_ms = self.throttle_next_ms, 0
        return ProduceResponse(got, throttle), any(v == self.lose_response_of for _, v, _, _ in seen)

    def _append(self, tp: TopicPartition, b: RecordBatch, value: str) -> tuple[int, int]:
        log = self.logs.setdefault(tp, PartitionLog())
        pid, seq = b.producer_id, b.base_sequence
        if b.size > self.max_batch_bytes:
            return MESSAGE_TOO_LARGE, -1
        if value in self.refuse:
            return self.refuse[value], -1
        if value in self.refuse_once:
            return self.refuse_once.pop(value), -1
        if (tp, pid) in self.forgotten:
            return self.forgotten_code, -1
        known = log.producers.get(pid)
        if known is not None:
            expected, recent = known
            for s, offset in recent:
                if s == seq:
                    self.duplicates += 1
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
        broker.connections += 1
        self.number = broker.connections

    def version_for(self, api_key: int, max_version: int | None = None) -> int:
        return PRODUCE_VERSION if api_key == ApiKey.PRODUCE else 4

    async def request(self, api_key: int, version: int, body: bytes, parser: Callable[..., Any],
                      timeout: float | None = None) -> Any:
        fb = self.broker
        if api_key == ApiKey.METADATA:
            fb.metadata_requests += 1
            return fb.metadata()
        if api_key == ApiKey.INIT_PRODUCER_ID:
            return fb.init_producer_id()
        assert (api_key, version) == (ApiKey.PRODUCE, PRODUCE_VERSION)
        if not self.connected:
            raise ConnectionLostError(f"connection {self.number} was cut")
        fb.requests += 1
        n = fb.requests
        fb.connection_of[n] = self.number
        resp, lost = fb.handle_produce(n, body)  # before any await: handled in the order written
        if lost and not fb.lost_answer_last:
            fb.lost_pending = n
        if fb.cut_connection_at is not None and fb.requests_with(fb.cut_connection_at) == [n]:
            fb.cut_connection_at = None
            self.connected = False
        tps = [TopicPartition(p.topic or "", p.partition) for p in resp.partitions]
        fb.in_flight += 1
        fb.max_in_flight = max(fb.max_in_flight, fb.in_flight)
        for tp in tps:
            fb.partition_in_flight[tp] = fb.partition_in_flight.get(tp, 0) + 1
            fb.max_partition_in_flight = max(fb.max_partition_in_flight, fb.partition_in_flight[tp])
        await asyncio.sleep(fb.answer_after)
        for _ in range(10_000):
            held, held_tp = fb.hold_answers_until_in_flight, fb.hold_answers_until_partition_in_flight
            if ((held is None or fb.max_in_flight >= held)
                    and (held_tp is None or fb.max_partition_in_flight >= held_tp)):
                break
            await asyncio.sleep(0.001)
        while fb.lost_pending is not None and fb.lost_pending < n:
            await asyncio.sleep(0.001)  # answers come in request order: the lost one's time-out first
        fb.in_flight -= 1
        for tp in tps:
            fb.partition_in_flight[tp] -= 1
        if not self.connected:
            raise ConnectionLostError(f"connection {self.number} was cut (request {n} was handled)")
        if lost:
            fb.lose_response_of = None
            awaited, fb.lost_answer_after = fb.lost_answer_after, None
            try:
                for _ in range(10_000):
                    if (awaited is None or fb.requests_with(awaited)) and (
                            not fb.lost_answer_last or fb.in_flight == 0):
                        break
                    await asyncio.sleep(0.001)
                else:
                    raise AssertionError(f"the producer never sent {awaited!r} behind the lost answer")
                if fb.on_lost_answer is not None:
                    fb.on_lost_answer()
                raise RequestTimeoutError(f"request {n} timed out (the broker did append it)")
            finally:
                fb.lost_pending = None
        fb.events.append(("answer", n))
        return resp

    async def close(self) -> None:
        self.connected = False


class FakeFactory:
    """Opens a new connection to the one broker on every call, as a real factory does."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    async def connect(self, host: str, port: int, node_id: int = -1) -> FakeConnection:
        return FakeConnection(self.broker)


async def producer_on(broker: FakeBroker, config: ProducerConfig | None = None) -> RawProducer:
    cluster = ClusterClient("fake:9092")
    cluster._factory = FakeFactory(broker)  # type: ignore[assignment]
    await cluster.start()
    return RawProducer(cluster, config)


