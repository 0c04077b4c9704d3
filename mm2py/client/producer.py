"""Raw producer: appends whole RecordBatches (acks=all) and returns their target base offsets.

Rules enforced before sending (see FACTS.md): control batches are refused; batches with offset gaps
are rebuilt (``rebuild_contiguous``); foreign producer state is stripped (``strip_producer_state``,
CRC recomputed); baseOffset is set to 0. One batch per partition per request, many partitions
per request, at most one request in flight per partition (a per-partition lock), so per-partition
order is preserved across retries. Retries (retriable errors, after a metadata refresh) may
duplicate a batch whose first attempt did reach the log: delivery is at-least-once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from mm2py.client.cluster import ClusterClient
from mm2py.client.connection import BrokerConnection
from mm2py.client.types import TopicPartition
from mm2py.protocol.api import (
    ApiKey,
    ProducePartitionResponse,
    ProduceTopicRequest,
    decode_produce_response,
    encode_produce_request,
)
from mm2py.protocol.api_produce import FIRST_TOPIC_ID_VERSION
from mm2py.protocol.batch_edit import rebuild_contiguous, strip_producer_state
from mm2py.protocol.errors_codes import NONE, BrokerError
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.wire import Buf

BatchLike = bytes | bytearray | memoryview | RecordBatch


@dataclass(frozen=True)
class ProducerConfig:
    acks: int = -1
    timeout_ms: int = 30_000
    #: total time spent retrying one produce round
    retry_timeout_s: float = 60.0
    #: split a broker's share of a round into requests of at most this many record bytes
    max_request_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.acks not in (-1, 1):
            raise ValueError("acks must be -1 (all) or 1: the raw producer needs responses")


def _has_producer_state(b: RecordBatch) -> bool:
    return b.producer_id != -1 or b.producer_epoch != -1 or b.base_sequence != -1 or b.is_transactional


def prepare_batch(batch: BatchLike) -> bytes:
    """Make a fetched batch acceptable to a stock broker's Produce (see module docstring).

    Raises ValueError for a control batch and CorruptBatchError for a bad CRC.
    """
    b = batch if isinstance(batch, RecordBatch) else RecordBatch(batch)
    if b.is_control:
        raise ValueError(f"control batch at offset {b.base_offset} cannot be produced")
    b.verify()
    # The broker checks the header only (recordsCount == lastOffsetDelta + 1, LogValidator's
    # validateBatch); a per-record delta scan here would put Python work per record on the hot path.
    if not b.is_contiguous():
        b, _ = rebuild_contiguous(b)
    if _has_producer_state(b):
        b = RecordBatch(strip_producer_state(b, verify=False))
    if b.base_offset != 0 or b.partition_leader_epoch != -1:
        return b.rebased(0)
    return bytes(b)


class RawProducer:
    def __init__(self, cluster: ClusterClient, config: ProducerConfig | None = None) -> None:
        self.cluster = cluster
        self.config = config or ProducerConfig()
        self._locks: dict[TopicPartition, asyncio.Lock] = {}

    def _lock(self, tp: TopicPartition) -> asyncio.Lock:
        lock = self._locks.get(tp)
        if lock is None:
            lock = self._locks[tp] = asyncio.Lock()
        return lock

    async def send(self, tp: TopicPartition, batch: BatchLike) -> int:
        """Append one batch; returns its base offset in the target partition."""
        return (await self.produce([(tp, batch)]))[0]

    async def produce(self, items: Sequence[tuple[TopicPartition, BatchLike]]) -> list[int]:
        """Append batches; returns the target base offset of each, in input order.

        Batches of the same partition are appended in input order (one per request round).
        Raises BrokerError on a non-retriable error or when retries run out.
        """
        prepared = [(tp, prepare_batch(b)) for tp, b in items]
        rounds: list[dict[TopicPartition, int]] = []  # tp -> index into items
        depth: dict[TopicPartition, int] = {}
        for i, (tp, _) in enumerate(prepared):
            d = depth.get(tp, 0)
            depth[tp] = d + 1
            if d == len(rounds):
                rounds.append({})
            rounds[d][tp] = i
        offsets = [-1] * len(prepared)
        tps = sorted(depth)
        async with contextlib.AsyncExitStack() as stack:
            for tp in tps:  # sorted acquisition: no deadlock between concurrent produce() calls
                await stack.enter_async_context(self._lock(tp))
            for rnd in rounds:
                results = await self._produce_round({tp: prepared[i][1] for tp, i in rnd.items()})
                for tp, i in rnd.items():
                    r = results[tp]
                    if r.error_code != NONE:
                        raise BrokerError(r.error_code, f"produce to {tp}: {r.error_message or ''}")
                    offsets[i] = r.base_offset
        return offsets

    async def _produce_round(
        self, batches: dict[TopicPartition, bytes]
    ) -> dict[TopicPartition, ProducePartitionResponse]:
        cfg = self.config

        async def send(
            conn: BrokerConnection, part: dict[TopicPartition, bytes]
        ) -> dict[TopicPartition, ProducePartitionResponse]:
            chunks: list[dict[TopicPartition, bytes]] = [{}]
            size = 0
            for tp, data in part.items():
                if chunks[-1] and size + len(data) > cfg.max_request_bytes:
                    chunks.append({})
                    size = 0
                chunks[-1][tp] = data
                size += len(data)
            out: dict[TopicPartition, ProducePartitionResponse] = {}
            for res in await asyncio.gather(*(send_one(conn, c) for c in chunks)):
                out.update(res)
            return out

        async def send_one(
            conn: BrokerConnection, part: dict[TopicPartition, bytes]
        ) -> dict[TopicPartition, ProducePartitionResponse]:
            by_topic: dict[str, list[tuple[int, Buf]]] = {}
            for tp, data in part.items():
                by_topic.setdefault(tp.topic, []).append((tp.partition, data))
            ids = {t: self.cluster.topic_id(t) for t in by_topic}
            cap = None if all(ids.values()) else FIRST_TOPIC_ID_VERSION - 1
            version = self.cluster.version_for(conn, ApiKey.PRODUCE, cap)
            body = encode_produce_request(
                version,
                [ProduceTopicRequest(t, ps, ids[t]) for t, ps in by_topic.items()],
                acks=cfg.acks,
                timeout_ms=cfg.timeout_ms,
            )
            timeout = conn.config.request_timeout_s + cfg.timeout_ms / 1000
            resp = await conn.request(ApiKey.PRODUCE, version, body, decode_produce_response, timeout)
            names = {v: k for k, v in ids.items() if v is not None}
            out: dict[TopicPartition, ProducePartitionResponse] = {}
            for r in resp.partitions:
                name = r.topic
                if name is None and r.topic_id is not None:
                    name = names.get(r.topic_id)
                if name is not None:
                    out[TopicPartition(name, r.partition)] = r
            return out

        return await self.cluster.for_leaders(
            batches, send, lambda r: r.error_code, timeout=cfg.retry_timeout_s
        )
