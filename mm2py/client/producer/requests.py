"""Produce and InitProducerId requests for one cluster: building them, sending them, reading the answers.

One batch per partition per request, many partitions per request; a broker's share of a wave is
split into requests of at most ``max_request_bytes`` record bytes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from mm2py.client.cluster import ClusterClient, back_off, backoff_expired, deadline_backoff, topic_namer
from mm2py.client.connection import BrokerConnection
from mm2py.client.errors import ClientError
from mm2py.protocol.api import (
    ApiKey,
    ProducePartitionResponse,
    ProduceResponse,
    ProduceTopicRequest,
    decode_init_producer_id_response,
    decode_produce_response,
    encode_init_producer_id_request,
    encode_produce_request,
)
from mm2py.protocol.api_produce import FIRST_TOPIC_ID_VERSION
from mm2py.protocol.errors_codes import NONE, BrokerError, is_retriable_code
from mm2py.protocol.types import TopicPartition
from mm2py.protocol.wire import Buf

__all__ = [
    "MAX_CONNECTIONS_PER_BROKER", "MAX_WINDOW", "REMEMBERED",
    "ProduceRequests", "ProducerConfig", "RequestMux", "by_partition",
]

#: batches per producer and partition a broker keeps for its duplicate check
#: (ProducerStateEntry.NUM_BATCHES_TO_RETAIN in Kafka's storage module)
REMEMBERED = 5
#: the deepest window of batches in flight per partition (see the pipeline's ``DEEP``)
MAX_WINDOW = 32
#: more would only add sockets: a broker has few request handler threads (num.io.threads, 8)
MAX_CONNECTIONS_PER_BROKER = 8


@dataclass(frozen=True)
class ProducerConfig:
    acks: int = -1
    timeout_ms: int = 30_000
    #: how long a partition's lane goes on sending its unacknowledged batches again after a
    #: failure (from its first failure since the last acknowledgment) before it gives up; also the
    #: bound of a wave's retries without idempotence and of asking for a producer id
    retry_timeout_s: float = 60.0
    #: split a broker's share of a wave into requests of at most this many record bytes
    max_request_bytes: int = 16 * 1024 * 1024
    #: stamp batches with our own producer id and sequences (broker-side dedupe of retries)
    idempotent: bool = True
    #: batches of one partition in flight (idempotent only). The broker dedupes the last
    #: REMEMBERED (5); a deeper window moves more bytes per round trip, and after a failure that
    #: left more than five unanswered the caller must read what the partition holds (DEEP)
    max_in_flight: int = 5
    #: connections to each broker that produce requests go out on (idempotent only; a partition
    #: keeps one): a broker works on one request per connection at a time, so with more it
    #: validates and appends several at once and each partition's window cycles faster
    connections_per_broker: int = 1

    def __post_init__(self) -> None:
        if self.acks not in (-1, 1):
            raise ValueError("acks must be -1 (all) or 1: the raw producer needs responses")
        if not 1 <= self.max_in_flight <= MAX_WINDOW:
            raise ValueError(f"max_in_flight must be 1..{MAX_WINDOW}")
        if not 1 <= self.connections_per_broker <= MAX_CONNECTIONS_PER_BROKER:
            raise ValueError(f"connections_per_broker must be 1..{MAX_CONNECTIONS_PER_BROKER}")


class Answers(dict[TopicPartition, ProducePartitionResponse]):
    """A Produce response's partitions, keyed by (topic name, partition), and the time the broker
    asked us to wait for a quota (``throttle_ms``, KIP-219; see :mod:`.throttle`)."""

    throttle_ms: int = 0


def by_partition(resp: ProduceResponse, ids: Mapping[str, uuid.UUID | None]) -> Answers:
    """A Produce response's partitions, keyed by (topic name, partition), with its throttle time."""
    name_of = topic_namer(ids)
    out = Answers()
    out.throttle_ms = resp.throttle_time_ms
    for r in resp.partitions:
        name = name_of(r.topic, r.topic_id)
        if name is not None:
            out[TopicPartition(name, r.partition)] = r
    return out


class _Shared:
    """One request being filled on one connection: the parts of several producers, each with the
    future its caller waits on."""

    __slots__ = ("partitions", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[tuple[Mapping[TopicPartition, bytes], asyncio.Future[Answers]]] = []
        self.partitions: set[TopicPartition] = set()
        self.size = 0


class RequestMux:
    """Produce requests of several producers (the tasks of one flow in one process, each with its
    own producer id) that are ready together on one connection go out as one request
    (``SHARED-REQUEST``): a request carries one batch per partition, each batch its own producer
    id and sequence, so the broker checks each as if it came alone. A part joins the last request
    being filled on its connection unless that one already names one of its partitions (then it
    starts the next): each partition's batches still go out in the order they were made, on the
    connection their producer chose (IN-ORDER). The requests being filled go out once an
    iteration of the event loop passed without a new part, or after :data:`MAX_TICKS`; so the
    tasks woken by one fetch produce with one request, not one each. Every producer of a mux
    sends to the same cluster client with the same acks and time-out (a flow's tasks)."""

    #: event-loop iterations a request waits for more parts at most
    MAX_TICKS = 4

    def __init__(self, max_request_bytes: int = ProducerConfig.max_request_bytes) -> None:
        self.max_request_bytes = max_request_bytes
        #: per connection, the requests being filled, in the order they go out
        self._filling: dict[BrokerConnection, list[_Shared]] = {}
        self._ticks = 0
        self._added = False
        self._scheduled = False
        #: requests sent (each possibly carrying several producers' parts)
        self.sent = 0
        #: parts that went out in a request of their own or with others
        self.parts = 0
        self._sending: set[asyncio.Future[None]] = set()

    async def request(self, requests: ProduceRequests, conn: BrokerConnection,
                      part: Mapping[TopicPartition, bytes]) -> Answers:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answers] = loop.create_future()
        size = sum(len(d) for d in part.values())
        queue = self._filling.setdefault(conn, [])
        shared = queue[-1] if queue else None
        if (shared is None or not shared.partitions.isdisjoint(part)
                or (shared.parts and shared.size + size > self.max_request_bytes)):
            shared = _Shared()
            queue.append(shared)
        shared.parts.append((part, future))
        shared.partitions.update(part)
        shared.size += size
        self._added = True
        if not self._scheduled:
            self._scheduled = True
            self._ticks = 0
            loop.call_soon(self._tick, requests)
        return await future

    def _tick(self, requests: ProduceRequests) -> None:
        self._ticks += 1
        if self._added and self._ticks < self.MAX_TICKS:
            self._added = False
            asyncio.get_running_loop().call_soon(self._tick, requests)
            return
        self._scheduled = self._added = False
        filling, self._filling = self._filling, {}
        for conn, queue in filling.items():
            for shared in queue:  # tasks run in creation order: written in this order
                parts = [(p, f) for p, f in shared.parts if not f.done()]  # a cancelled caller's left out
                if parts:
                    self.sent += 1
                    self.parts += len(parts)
                    task = asyncio.ensure_future(self._send(requests, conn, parts))
                    self._sending.add(task)
                    task.add_done_callback(self._sending.discard)

    @staticmethod
    async def _send(requests: ProduceRequests, conn: BrokerConnection,
                    parts: list[tuple[Mapping[TopicPartition, bytes], asyncio.Future[Answers]]]) -> None:
        merged: dict[TopicPartition, bytes] = {}
        for part, _ in parts:
            merged.update(part)
        try:
            answers = await requests.request_now(conn, merged)
            split = [(future, _share(part, answers)) for part, future in parts]
        except BaseException as exc:  # every caller gets the failure: none is left waiting
            for _, future in parts:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for future, mine in split:
            if not future.done():
                future.set_result(mine)


def _share(part: Mapping[TopicPartition, bytes], answers: Answers) -> Answers:
    """One caller's answers from a shared request: its own partitions, and the request's throttle
    time (every producer in the request was throttled)."""
    mine = Answers((tp, answers[tp]) for tp in part if tp in answers)
    mine.throttle_ms = answers.throttle_ms
    return mine


class ProduceRequests:
    """The requests a producer sends to ``cluster`` under ``config`` (through ``mux`` when the
    producer shares its connections' requests with others)."""

    def __init__(self, cluster: ClusterClient, config: ProducerConfig, mux: RequestMux | None = None) -> None:
        self.cluster = cluster
        self.config = config
        self.mux = mux

    def chunks(self, part: Mapping[TopicPartition, bytes]) -> list[dict[TopicPartition, bytes]]:
        """Split one broker's share of a round into requests of at most max_request_bytes."""
        chunks: list[dict[TopicPartition, bytes]] = [{}]
        size = 0
        for tp, data in part.items():
            if chunks[-1] and size + len(data) > self.config.max_request_bytes:
                chunks.append({})
                size = 0
            chunks[-1][tp] = data
            size += len(data)
        return chunks

    def encode(
        self, conn: BrokerConnection, part: Mapping[TopicPartition, bytes]
    ) -> tuple[int, bytes, dict[str, uuid.UUID | None]]:
        """(version, body, topic ids) of one Produce request carrying one batch per partition."""
        by_topic: dict[str, list[tuple[int, Buf]]] = {}
        for tp, data in part.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, data))
        ids = {t: self.cluster.topic_id(t) for t in by_topic}
        cap = None if all(ids.values()) else FIRST_TOPIC_ID_VERSION - 1
        version = self.cluster.version_for(conn, ApiKey.PRODUCE, cap)
        body = encode_produce_request(
            version,
            [ProduceTopicRequest(t, ps, ids[t]) for t, ps in by_topic.items()],
            acks=self.config.acks,
            timeout_ms=self.config.timeout_ms,
        )
        return version, body, ids

    async def request(self, conn: BrokerConnection, part: Mapping[TopicPartition, bytes]) -> Answers:
        """One Produce request on ``conn``; it is written before the coroutine first waits, or,
        with a mux, in the order of the calls on that connection."""
        if self.mux is not None:
            return await self.mux.request(self, conn, part)
        return await self.request_now(conn, part)

    async def request_now(self, conn: BrokerConnection, part: Mapping[TopicPartition, bytes]) -> Answers:
        """One Produce request on ``conn``, written before the coroutine first waits."""
        version, body, ids = self.encode(conn, part)
        timeout = conn.config.request_timeout_s + self.config.timeout_ms / 1000
        resp = await conn.request(ApiKey.PRODUCE, version, body, decode_produce_response, timeout)
        return by_partition(resp, ids)

    async def send_wave(
        self, batches: dict[TopicPartition, bytes]
    ) -> dict[TopicPartition, ProducePartitionResponse]:
        """One batch per partition to the partition leaders, retried until acknowledged or timed out."""

        async def send(
            conn: BrokerConnection, part: dict[TopicPartition, bytes]
        ) -> dict[TopicPartition, ProducePartitionResponse]:
            out: dict[TopicPartition, ProducePartitionResponse] = {}
            for res in await asyncio.gather(*(self.request(conn, c) for c in self.chunks(part))):
                out.update(res)
            return out

        return await self.cluster.for_leaders(
            batches, send, lambda r: r.error_code, timeout=self.config.retry_timeout_s
        )

    async def init_producer_id(self) -> tuple[int, int]:
        """A new (producer id, epoch) from any broker, retried while the error is retriable."""
        backoff = deadline_backoff(0.05, 1.0, self.config.retry_timeout_s)
        while True:
            try:
                conn = await self.cluster.any_connection()
                version = self.cluster.version_for(conn, ApiKey.INIT_PRODUCER_ID)
                resp = await conn.request(
                    ApiKey.INIT_PRODUCER_ID, version,
                    encode_init_producer_id_request(version),
                    decode_init_producer_id_response,
                )
                if resp.error_code == NONE:
                    return resp.producer_id, resp.producer_epoch
                err: BaseException = BrokerError(resp.error_code, "InitProducerId")
                if not is_retriable_code(resp.error_code):
                    raise err
            except ClientError as exc:
                err = exc
            if backoff_expired(backoff):
                raise err
            await back_off(backoff)
