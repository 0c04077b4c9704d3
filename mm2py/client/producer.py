"""Raw producer: appends whole RecordBatches (acks=all) and returns their target base offsets.

Rules enforced before sending (see FACTS.md): control batches are refused; batches with offset gaps
are rebuilt (``rebuild_contiguous``); foreign producer state is replaced; baseOffset is set to 0.
One batch per partition per request, many partitions per request, at most one request in flight
per partition (a per-partition lock), so per-partition order is preserved across retries.

Idempotence (default on): the producer gets its own producer id (InitProducerId) and stamps every
batch with it and a per-partition sequence number (one CRC-32C pass, no decompression, the same
cost as stripping the source's producer state). A retried request whose first attempt did reach
the log is then recognised by the broker as a duplicate instead of being appended twice. If the
broker has forgotten the producer (UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER after expiry),
a new producer id is taken and the round is sent again.

Pipelining (``max_in_flight > 1``) is only safe on a partition where the broker already holds our
producer state: a broker that does not know the producer on a partition accepts ANY sequence
number (ProducerAppendInfo.checkSequence), so a batch pipelined behind a refused first batch would
be appended out of order. A partition is therefore "confirmed" only after one of its batches was
acknowledged under the current producer id (and recently: brokers expire idle producer state);
an unconfirmed partition sends one batch alone first (the probe) and the rest only after its ack.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from mm2py.client.cluster import Backoff, ClusterClient
from mm2py.client.connection import BrokerConnection
from mm2py.client.produce_window import ProduceError, by_partition, produce_windowed
from mm2py.client.types import ClientError, TopicPartition
from mm2py.protocol.api import (
    ApiKey,
    ProducePartitionResponse,
    ProduceTopicRequest,
    decode_init_producer_id_response,
    decode_produce_response,
    encode_init_producer_id_request,
    encode_produce_request,
)
from mm2py.protocol.api_produce import FIRST_TOPIC_ID_VERSION
from mm2py.protocol.batch_edit import (
    for_produce,
    increment_sequence,
    rebuild_contiguous,
)
from mm2py.protocol.errors_codes import (
    INVALID_PRODUCER_EPOCH,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    UNKNOWN_PRODUCER_ID,
    BrokerError,
    is_retriable,
)
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.wire import Buf

BatchLike = bytes | bytearray | memoryview | RecordBatch
log = logging.getLogger(__name__)

#: the broker no longer knows our producer state for the partition: start over with a new id
_PRODUCER_FORGOTTEN = frozenset({UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH})
#: an acknowledgment older than this no longer proves the broker holds our producer state (brokers
#: drop idle producers after producer.id.expiration.ms, 1 day by default; operators may lower it)
CONFIRMED_FOR_S = 300.0


def _stamped(b: RecordBatch, producer_id: int, producer_epoch: int, sequence: int) -> bytes:
    """Produce bytes of a normalized batch; a batch already in that form is not copied again."""
    if producer_id == -1 and not _has_producer_state(b):
        # nothing inside the CRC changes: only the offset and leader epoch fields, if at all
        if b.base_offset == 0 and b.partition_leader_epoch == -1:
            return bytes(b)
        return b.rebased(0)
    return for_produce(b, producer_id, producer_epoch, sequence, verify=False)


def _rounds(items: Sequence[tuple[TopicPartition, object]]) -> list[dict[TopicPartition, int]]:
    """Round k holds the index of the k-th item of each partition."""
    rounds: list[dict[TopicPartition, int]] = []
    depth: dict[TopicPartition, int] = {}
    for i, (tp, _) in enumerate(items):
        d = depth.get(tp, 0)
        depth[tp] = d + 1
        if d == len(rounds):
            rounds.append({})
        rounds[d][tp] = i
    return rounds


@dataclass(frozen=True)
class ProducerConfig:
    acks: int = -1
    timeout_ms: int = 30_000
    #: total time spent retrying one produce round
    retry_timeout_s: float = 60.0
    #: split a broker's share of a round into requests of at most this many record bytes
    max_request_bytes: int = 16 * 1024 * 1024
    #: stamp batches with our own producer id and sequences (broker-side dedupe of retries)
    idempotent: bool = True
    #: request rounds in flight per connection (idempotent only; the broker dedupes at most 5)
    max_in_flight: int = 5

    def __post_init__(self) -> None:
        if self.acks not in (-1, 1):
            raise ValueError("acks must be -1 (all) or 1: the raw producer needs responses")
        if not 1 <= self.max_in_flight <= 5:
            raise ValueError("max_in_flight must be 1..5 (the broker remembers 5 batches per producer)")


def _has_producer_state(b: RecordBatch) -> bool:
    return b.producer_id != -1 or b.producer_epoch != -1 or b.base_sequence != -1 or b.is_transactional


def normalize_batch(batch: BatchLike, *, verified: bool = False) -> RecordBatch:
    """Checks and the rebuild a fetched batch needs before any producer state is stamped on it.

    Raises ValueError for a control batch and CorruptBatchError for a bad CRC. ``verified=True``
    says the caller already checked the CRC (e.g. ``RawFetcher`` verifies every batch it returns).
    """
    b = batch if isinstance(batch, RecordBatch) else RecordBatch(batch)
    if b.is_control:
        raise ValueError(f"control batch at offset {b.base_offset} cannot be produced")
    if not verified:
        b.verify()
    # The broker checks the header only (recordsCount == lastOffsetDelta + 1, LogValidator's
    # validateBatch); a per-record delta scan here would put Python work per record on the hot path.
    if not b.is_contiguous():
        b, _ = rebuild_contiguous(b)
    return b


def prepare_batch(batch: BatchLike) -> bytes:
    """Make a fetched batch acceptable to a stock broker's Produce without idempotence.

    Raises ValueError for a control batch and CorruptBatchError for a bad CRC.
    """
    return _stamped(normalize_batch(batch), -1, -1, -1)


class RawProducer:
    def __init__(self, cluster: ClusterClient, config: ProducerConfig | None = None) -> None:
        self.cluster = cluster
        self.config = config or ProducerConfig()
        self._locks: dict[TopicPartition, asyncio.Lock] = {}
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences: dict[TopicPartition, int] = {}
        #: partition -> when a batch was last acknowledged under the current producer id
        self._confirmed: dict[TopicPartition, float] = {}
        self._pid_lock = asyncio.Lock()

    def _lock(self, tp: TopicPartition) -> asyncio.Lock:
        lock = self._locks.get(tp)
        if lock is None:
            lock = self._locks[tp] = asyncio.Lock()
        return lock

    async def send(self, tp: TopicPartition, batch: BatchLike) -> int:
        """Append one batch; returns its base offset in the target partition."""
        return (await self.produce([(tp, batch)]))[0]

    async def produce(
        self, items: Sequence[tuple[TopicPartition, BatchLike]], *, verified: bool = False
    ) -> list[int]:
        """Append batches; returns the target base offset of each, in input order.

        Batches of the same partition are appended in input order (one per request round).
        ``verified=True``: every batch's CRC was already checked, so it is not computed again.
        Raises ProduceError (with what was acknowledged) when not everything was delivered.
        """
        idempotent = self.config.idempotent
        normalized = [(tp, normalize_batch(b, verified=verified)) for tp, b in items]
        rounds = _rounds(normalized)
        async with self._locked(rounds):
            if idempotent and self.config.max_in_flight > 1 and len(rounds) > 1:
                return await self._produce_pipelined(normalized, rounds)
            return await self._produce_rounds(normalized, rounds)

    async def _produce_pipelined(
        self,
        normalized: Sequence[tuple[TopicPartition, RecordBatch]],
        rounds: list[dict[TopicPartition, int]],
    ) -> list[int]:
        """Probe unconfirmed partitions with their first batch, then pipeline everything else."""
        offsets = [-1] * len(normalized)
        error: ProduceError | None = None
        probe = [i for tp, i in rounds[0].items() if not self.confirmed(tp)]
        refused: set[TopicPartition] = set()
        if probe:
            sub = [normalized[i] for i in probe]
            try:
                got = await self._produce_rounds(sub, _rounds(sub))
            except ProduceError as exc:
                got, error = exc.offsets, exc
            for i, off in zip(probe, got, strict=True):
                offsets[i] = off
                if off < 0:
                    refused.add(normalized[i][0])
        probed = set(probe)
        rest = [i for i, (tp, _) in enumerate(normalized) if i not in probed and tp not in refused]
        if rest:
            sub = [normalized[i] for i in rest]
            try:
                got = await produce_windowed(self, sub, _rounds(sub), self.config.max_in_flight)
            except ProduceError as exc:
                got, error = exc.offsets, error or exc
            for i, off in zip(rest, got, strict=True):
                offsets[i] = off
        if error is not None:
            raise ProduceError(str(error), offsets, error.cause)
        return offsets

    async def _produce_rounds(
        self,
        normalized: Sequence[tuple[TopicPartition, RecordBatch]],
        rounds: list[dict[TopicPartition, int]],
    ) -> list[int]:
        """One round at a time, each retried (after a metadata refresh) until it is acknowledged."""
        idempotent = self.config.idempotent
        offsets = [-1] * len(normalized)
        for rnd in rounds:
            results: dict[TopicPartition, ProducePartitionResponse] = {}
            pending = dict(rnd)
            for attempt in (1, 2):
                pid, epoch = await self.ensure_producer_id() if idempotent else (-1, -1)
                seqs = {tp: self._sequences.get(tp, 0) if idempotent else -1 for tp in pending}
                try:
                    got = await self._produce_round({
                        tp: _stamped(normalized[i][1], pid, epoch, seqs[tp]) for tp, i in pending.items()
                    })
                except Exception as exc:
                    raise ProduceError(f"produce failed: {exc}", offsets, exc) from exc
                for tp, r in got.items():
                    results[tp] = r
                    if r.error_code == NONE and idempotent:
                        count = normalized[pending[tp]][1].records_count
                        self.set_sequence(tp, increment_sequence(seqs[tp], count))
                lost = [tp for tp, r in got.items() if r.error_code in _PRODUCER_FORGOTTEN]
                if lost and idempotent and attempt == 1:
                    # new producer id, sequences from 0; only what was refused is sent again (the
                    # partitions already acknowledged would be appended twice under a new id)
                    await self.reset_producer_id(pid)
                    pending = {tp: rnd[tp] for tp in lost}
                    continue
                break
            failed: BrokerError | None = None
            for tp, i in rnd.items():
                r = results[tp]
                if r.error_code != NONE:
                    failed = failed or BrokerError(r.error_code, f"produce to {tp}: {r.error_message or ''}")
                    continue
                offsets[i] = r.base_offset
            if failed is not None:
                raise ProduceError(str(failed), offsets, failed)
        return offsets

    def sequence(self, tp: TopicPartition) -> int:
        """The sequence number the partition's next batch gets."""
        return self._sequences.get(tp, 0)

    def set_sequence(self, tp: TopicPartition, sequence: int) -> None:
        """Record an acknowledged batch: the partition's next sequence; the broker now knows us."""
        self._sequences[tp] = sequence
        self._confirmed[tp] = time.monotonic()

    def confirmed(self, tp: TopicPartition) -> bool:
        """Whether the broker surely holds our producer state for the partition (safe to pipeline)."""
        at = self._confirmed.get(tp)
        return at is not None and time.monotonic() - at < CONFIRMED_FOR_S

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

    @contextlib.asynccontextmanager
    async def _locked(self, rounds: list[dict[TopicPartition, int]]) -> AsyncIterator[None]:
        tps = sorted({tp for rnd in rounds for tp in rnd})
        async with contextlib.AsyncExitStack() as stack:
            for tp in tps:  # sorted acquisition: no deadlock between concurrent produce() calls
                await stack.enter_async_context(self._lock(tp))
            yield

    async def ensure_producer_id(self) -> tuple[int, int]:
        if self.producer_id >= 0:
            return self.producer_id, self.producer_epoch
        async with self._pid_lock:
            if self.producer_id < 0:
                backoff = Backoff(0.05, 1.0, self.config.retry_timeout_s)
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
                            break
                        err: BaseException = BrokerError(resp.error_code, "InitProducerId")
                        if not is_retriable(resp.error_code):
                            raise err
                    except ClientError as exc:
                        err = exc
                    if backoff.expired:
                        raise err
                    await backoff.sleep()
                self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
                self._sequences.clear()
                self._confirmed.clear()
                log.info("producer id %d epoch %d", self.producer_id, self.producer_epoch)
        return self.producer_id, self.producer_epoch

    async def reset_producer_id(self, seen: int) -> None:
        async with self._pid_lock:
            if self.producer_id == seen:
                log.warning("broker forgot producer id %d; taking a new one", seen)
                self.producer_id = self.producer_epoch = -1
                self._sequences.clear()
                self._confirmed.clear()

    def encode_request(
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

    async def _produce_round(
        self, batches: dict[TopicPartition, bytes]
    ) -> dict[TopicPartition, ProducePartitionResponse]:
        cfg = self.config

        async def send(
            conn: BrokerConnection, part: dict[TopicPartition, bytes]
        ) -> dict[TopicPartition, ProducePartitionResponse]:
            chunks = self.chunks(part)
            out: dict[TopicPartition, ProducePartitionResponse] = {}
            for res in await asyncio.gather(*(send_one(conn, c) for c in chunks)):
                out.update(res)
            return out

        async def send_one(
            conn: BrokerConnection, part: dict[TopicPartition, bytes]
        ) -> dict[TopicPartition, ProducePartitionResponse]:
            version, body, ids = self.encode_request(conn, part)
            timeout = conn.config.request_timeout_s + cfg.timeout_ms / 1000
            resp = await conn.request(ApiKey.PRODUCE, version, body, decode_produce_response, timeout)
            return by_partition(resp, ids)

        return await self.cluster.for_leaders(
            batches, send, lambda r: r.error_code, timeout=cfg.retry_timeout_s
        )
