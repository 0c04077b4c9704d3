"""RawProducer: appends whole RecordBatches (acks=all) and returns their target base offsets.

Idempotence (default on): the producer gets its own producer id (InitProducerId) and stamps every
batch with it and a per-partition sequence number (one CRC-32C pass, no decompression, the same
cost as stripping the source's producer state). A retried batch whose first attempt did reach the
log is then recognised by the broker as a duplicate instead of being appended twice. Batches go
through the continuous :class:`~.pipeline.ProducePipeline`: up to ``max_in_flight`` batches per
partition in flight, a partition the broker does not surely know us on probed with one batch
first, each partition's unacknowledged batches re-sent by its lane after a retriable failure until
the retry time-out. A caller sees an acknowledged prefix per partition and, once a lane gave up,
its failure (:class:`~.results.Acknowledged`); the lane then stays stopped until the caller,
having seen it, calls :meth:`RawProducer.resume`.

Without idempotence, a call sends one wave at a time (the k-th batch of every partition), one
call at a time per partition (a per-partition lock), so per-partition order holds across retries.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from mm2py.client.cluster import ClusterClient
from mm2py.client.errors import ProduceError
from mm2py.client.producer.batches import BatchLike, normalize_batch, split_waves, stamp
from mm2py.client.producer.pipeline import ProducePipeline
from mm2py.client.producer.requests import ProducerConfig, ProduceRequests, RequestMux
from mm2py.client.producer.results import Submission
from mm2py.client.producer.state import ProducerState
from mm2py.protocol.api import ProducePartitionResponse
from mm2py.protocol.errors_codes import NONE, BrokerError
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

__all__ = ["RawProducer"]

Waves = list[dict[TopicPartition, int]]
Normalized = Sequence[tuple[TopicPartition, RecordBatch]]


class RawProducer:
    def __init__(
        self, cluster: ClusterClient, config: ProducerConfig | None = None, *, mux: RequestMux | None = None
    ) -> None:
        self.cluster = cluster
        self.config = config or ProducerConfig()
        self.requests = ProduceRequests(cluster, self.config, mux)
        self.state = ProducerState(self.requests.init_producer_id)
        self.pipeline = ProducePipeline(self.state, self.requests, self.config.max_in_flight,
                                        self.config.connections_per_broker)
        self._locks: dict[TopicPartition, asyncio.Lock] = {}
        self._starting: asyncio.Task[tuple[int, int]] | None = None  # see start()

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
    @property
    def pipelined(self) -> bool:
        """Idempotent: batches go through the continuous pipeline (``pipeline``)."""
        return self.config.idempotent

    async def send(self, tp: TopicPartition, batch: BatchLike) -> int:
        """Append one batch; returns its base offset in the target partition."""
        return (await self.produce([(tp, batch)]))[0]

    def submit(self, items: Sequence[tuple[TopicPartition, RecordBatch]]) -> Submission:
        """Queue batches and return at once: a :class:`Submission` (a future per batch, its target
        base offset; then what they came to, an acknowledged prefix per partition).

        The batches' CRCs must have been checked (``RawFetcher`` checks every batch it returns; a
        merged or rebuilt batch is built with a fresh one). Batches of a partition are appended
        in submission order, across calls: a caller may submit more before earlier batches are
        acknowledged. The producer sends unacknowledged batches again itself; once it gives up on
        a partition, the partition is stopped (its later batches fail too) until :meth:`resume`."""
        return self._submit([(tp, normalize_batch(b, verified=True)) for tp, b in items])

    def _submit(self, normalized: Normalized) -> Submission:
        partitions = [tp for tp, _ in normalized]
        if self.pipelined:
            return Submission(partitions, self.pipeline.submit(normalized), self.pipeline.in_doubt)
        task = asyncio.ensure_future(self._produce_serial(normalized))
        # without idempotence a failed batch may have been appended: every failure is in doubt
        return Submission(partitions, [_nth(task, i) for i in range(len(normalized))], lambda _tp: True)

    def resume(self, partitions: Sequence[TopicPartition] | None = None) -> None:
        """The caller has seen the failures: stopped partitions may send again (see :meth:`submit`)."""
        if self.pipelined:
            self.pipeline.resume(partitions)

    async def produce(self, items: Sequence[tuple[TopicPartition, BatchLike]]) -> list[int]:
        """Append batches (each CRC-checked here); returns the target base offset of each, in
        input order.

        Batches of the same partition are appended in input order. Raises ProduceError (with what
        was acknowledged: a prefix per partition) when not everything was delivered: the producer
        re-sent what it could until ``retry_timeout_s`` (a partition whose producer state the
        broker lost under a new producer id). The failed partitions may be produced again at once."""
        normalized = [(tp, normalize_batch(b)) for tp, b in items]
        if not self.pipelined:
            return await self._produce_serial(normalized)
        submission = self._submit(normalized)
        await submission.wait()
        acked = submission.result()
        self.pipeline.resume(list(acked.failures))
        if acked.cause is not None:
            raise ProduceError(f"{len(acked.failures)} partitions not fully delivered: {acked.cause}",
                               acked.offsets, acked.cause)
        return acked.offsets

    async def _produce_serial(self, normalized: Normalized) -> list[int]:
        """Without idempotence: one wave at a time per call, calls in order per partition."""
        waves = split_waves(normalized)
        async with self._locked(waves):
            return await self._produce_waves(normalized, waves)

    def start(self) -> None:
        """Ask for our producer id now, in the background, instead of at the first produce (one
        round trip less before the first batch, which matters across a long link). A failure here
        is not reported: the first produce asks again and reports it."""
        if self.pipelined and self._starting is None:
            self._starting = asyncio.create_task(self.state.ensure())
            self._starting.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def close(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
        await self.pipeline.close()

    async def _produce_waves(self, normalized: Normalized, waves: Waves) -> list[int]:
        """One wave at a time, each retried (after a metadata refresh) until it is acknowledged."""
        offsets = [-1] * len(normalized)
        for wave in waves:
            results = await self._send_wave(normalized, wave, offsets)
            failed: BrokerError | None = None
            for tp, i in wave.items():
                r = results[tp]
                if r.error_code != NONE:
                    failed = failed or BrokerError(r.error_code, f"produce to {tp}: {r.error_message or ''}")
                    continue
                offsets[i] = r.base_offset
            if failed is not None:
                raise ProduceError(str(failed), offsets, failed)
        return offsets

    async def _send_wave(
        self, normalized: Normalized, wave: dict[TopicPartition, int], offsets: list[int]
    ) -> dict[TopicPartition, ProducePartitionResponse]:
        """One wave without producer state, retried until acknowledged or timed out."""
        try:
            return await self.requests.send_wave({
                tp: stamp(normalized[i][1], -1, -1, -1) for tp, i in wave.items()
            })
        except Exception as exc:
            raise ProduceError(f"produce failed: {exc}", offsets, exc) from exc

    @contextlib.asynccontextmanager
    async def _locked(self, waves: Waves) -> AsyncIterator[None]:
        tps = sorted({tp for wave in waves for tp in wave})
        async with contextlib.AsyncExitStack() as stack:
            for tp in tps:  # sorted acquisition: no deadlock between concurrent produce() calls
                lock = self._locks.get(tp)
                if lock is None:
                    lock = self._locks[tp] = asyncio.Lock()
                await stack.enter_async_context(lock)
            yield


def _nth(task: asyncio.Future[list[int]], i: int) -> asyncio.Future[int]:
    """The ``i``-th offset of ``task``'s result as a future (-1 or a ProduceError: the error)."""
    out: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def done(t: asyncio.Future[list[int]]) -> None:
        exc = t.exception()
        offsets = exc.offsets if isinstance(exc, ProduceError) else None
        if exc is None:
            out.set_result(t.result()[i])
        elif offsets is not None and offsets[i] >= 0:
            out.set_result(offsets[i])
        else:
            out.set_exception(exc)

    task.add_done_callback(done)
    return out
