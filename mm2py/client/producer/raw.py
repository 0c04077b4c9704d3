"""RawProducer: appends whole RecordBatches (acks=all) and returns their target base offsets.

One batch per partition per request, many partitions per request, at most one produce call at a
time per partition (a per-partition lock), so per-partition order is preserved across retries.

Idempotence (default on): the producer gets its own producer id (InitProducerId) and stamps every
batch with it and a per-partition sequence number (one CRC-32C pass, no decompression, the same
cost as stripping the source's producer state). A retried request whose first attempt did reach
the log is then recognised by the broker as a duplicate instead of being appended twice. If the
broker has forgotten the producer (UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER after expiry),
a new producer id is taken and the round is sent again.

Pipelining (``max_in_flight > 1``) is only safe on a partition where the broker already holds our
producer state (see :mod:`.state`): an unconfirmed partition sends one batch alone first (the
probe) and the rest only after its ack.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from mm2py.client.cluster import ClusterClient
from mm2py.client.errors import ProduceError
from mm2py.client.producer.batches import BatchLike, normalize_batch, split_rounds, stamp
from mm2py.client.producer.requests import ProducerConfig, ProduceRequests
from mm2py.client.producer.state import ProducerState, producer_state_lost
from mm2py.client.producer.window import produce_windowed
from mm2py.protocol.api import ProducePartitionResponse
from mm2py.protocol.batch_edit import increment_sequence
from mm2py.protocol.errors_codes import NONE, BrokerError
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

__all__ = ["RawProducer"]

Rounds = list[dict[TopicPartition, int]]
Normalized = Sequence[tuple[TopicPartition, RecordBatch]]


class RawProducer:
    def __init__(self, cluster: ClusterClient, config: ProducerConfig | None = None) -> None:
        self.cluster = cluster
        self.config = config or ProducerConfig()
        self.requests = ProduceRequests(cluster, self.config)
        self.state = ProducerState(self.requests.init_producer_id)
        self._locks: dict[TopicPartition, asyncio.Lock] = {}

    # ------------------------------------------------------------- producer state, for callers
    @property
    def producer_id(self) -> int:
        return self.state.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.state.producer_epoch

    def sequence(self, tp: TopicPartition) -> int:
        """The sequence number the partition's next batch gets."""
        return self.state.sequence(tp)

    def set_sequence(self, tp: TopicPartition, sequence: int) -> None:
        """Record an acknowledged batch: the partition's next sequence; the broker now knows us."""
        self.state.set_sequence(tp, sequence)

    def confirmed(self, tp: TopicPartition) -> bool:
        """Whether the broker surely holds our producer state for the partition (safe to pipeline)."""
        return self.state.confirmed(tp)

    # -------------------------------------------------------------------------------- produce
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
        normalized = [(tp, normalize_batch(b, verified=verified)) for tp, b in items]
        rounds = split_rounds(normalized)
        async with self._locked(rounds):
            if self.config.idempotent and self.config.max_in_flight > 1 and len(rounds) > 1:
                return await self._produce_pipelined(normalized, rounds)
            return await self._produce_rounds(normalized, rounds)

    async def _produce_pipelined(self, normalized: Normalized, rounds: Rounds) -> list[int]:
        """Probe unconfirmed partitions with their first batch, then pipeline everything else."""
        offsets = [-1] * len(normalized)
        error: ProduceError | None = None
        probe = [i for tp, i in rounds[0].items() if not self.state.confirmed(tp)]
        refused: set[TopicPartition] = set()
        if probe:
            sub = [normalized[i] for i in probe]
            try:
                got = await self._produce_rounds(sub, split_rounds(sub))
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
                got = await produce_windowed(self.state, self.requests, sub, self.config.max_in_flight)
            except ProduceError as exc:
                got, error = exc.offsets, error or exc
            for i, off in zip(rest, got, strict=True):
                offsets[i] = off
        if error is not None:
            raise ProduceError(str(error), offsets, error.cause)
        return offsets

    async def _produce_rounds(self, normalized: Normalized, rounds: Rounds) -> list[int]:
        """One round at a time, each retried (after a metadata refresh) until it is acknowledged."""
        offsets = [-1] * len(normalized)
        for rnd in rounds:
            results = await self._send_round(normalized, rnd, offsets)
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

    async def _send_round(
        self, normalized: Normalized, rnd: dict[TopicPartition, int], offsets: list[int]
    ) -> dict[TopicPartition, ProducePartitionResponse]:
        """One round; if the broker forgot our producer, once more under a new producer id."""
        idempotent = self.config.idempotent
        results: dict[TopicPartition, ProducePartitionResponse] = {}
        pending = dict(rnd)
        for attempt in (1, 2):
            pid, epoch = await self.state.ensure() if idempotent else (-1, -1)
            seqs = {tp: self.state.sequence(tp) if idempotent else -1 for tp in pending}
            try:
                got = await self.requests.send_round({
                    tp: stamp(normalized[i][1], pid, epoch, seqs[tp]) for tp, i in pending.items()
                })
            except Exception as exc:
                raise ProduceError(f"produce failed: {exc}", offsets, exc) from exc
            for tp, r in got.items():
                results[tp] = r
                if r.error_code == NONE and idempotent:
                    count = normalized[pending[tp]][1].records_count
                    self.state.set_sequence(tp, increment_sequence(seqs[tp], count))
            lost = [tp for tp, r in got.items() if producer_state_lost(r.error_code)]
            if not (lost and idempotent and attempt == 1):
                break
            # new producer id, sequences from 0; only what was refused is sent again (the
            # partitions already acknowledged would be appended twice under a new id)
            await self.state.reset(pid)
            pending = {tp: rnd[tp] for tp in lost}
        return results

    @contextlib.asynccontextmanager
    async def _locked(self, rounds: Rounds) -> AsyncIterator[None]:
        tps = sorted({tp for rnd in rounds for tp in rnd})
        async with contextlib.AsyncExitStack() as stack:
            for tp in tps:  # sorted acquisition: no deadlock between concurrent produce() calls
                lock = self._locks.get(tp)
                if lock is None:
                    lock = self._locks[tp] = asyncio.Lock()
                await stack.enter_async_context(lock)
            yield
