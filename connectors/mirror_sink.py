"""MirrorSink: the produce side of a mirror task (raw record batches to target partitions).

Source partition ``t-p`` goes to target partition ``<policy-renamed t>-p``. A batch leaves as it
came, except for what a stock broker requires: baseOffset 0 and no foreign producer state
(done by :class:`mm2py.client.producer.RawProducer`, a CRC recompute and no decompression), and a
contiguous offset range — a batch with compaction gaps is rebuilt here, and the original source
offset of each record is kept so offset syncs stay exact. Runs of small batches are merged into
larger ones (``mm2py.coalesce.*``, :mod:`mm2py.connectors.outgoing`); a merged batch covers several source
batches, and its :class:`Delivered` says so (source range, source position after it).

The producer re-sends unacknowledged batches itself (the same bytes); a put sees only what was
acknowledged (a prefix per partition) and, once the producer gave up on a partition, the failure.

A batch larger than the target topic accepts is split into pieces that fit (``outgoing.fit``):
the sink asks a target topic's limit (:class:`TargetLimits`) before it first produces to it —
that put, and every put after it until the answer, waits for it, so the order per partition
holds — and again after the target refused a batch as too large. A record that does not fit even
alone holds its partition: the pieces before it are produced, nothing of the partition after it,
and the put fails naming it (``SinkError.refused``) until the task has seen that (:meth:`recover`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from mm2py.client.cluster import LATEST
from mm2py.client.errors import ResendRefusedError
from mm2py.client.producer import PartitionFailure, RawProducer, Submission
from mm2py.client.producer.throttle import Throttles
from mm2py.connectors.outgoing import CoalesceSettings, Outgoing, fit, prepare
from mm2py.connectors.target_limits import TargetLimits
from mm2py.engine.task_contract import START_LOOKUP_SECONDS, Delivered, RefusedRecord, SinkError
from mm2py.protocol.errors_codes import TOO_LARGE, BrokerError
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

log = logging.getLogger(__name__)


class MirrorSink:
    def __init__(
        self,
        producer: RawProducer,
        rename: Callable[[str], str],
        coalescing: CoalesceSettings | None = None,
        *,
        owns_cluster: bool = True,
        limits: TargetLimits | None = None,
    ) -> None:
        """``limits``: the target topics' batch limits, asked for as needed (None: batches are
        produced as prepared, whatever their size)."""
        self.producer = producer
        #: False when the producer's cluster client is shared with other tasks (left open on close)
        self.owns_cluster = owns_cluster
        self.rename = rename
        self.coalescing = coalescing  # None or not enabled: every batch as it came
        self._names: dict[str, str] = {}
        self.limits = limits
        #: source partitions held at a record the target refuses even alone, until :meth:`recover`
        self._held: dict[TopicPartition, RefusedRecord] = {}
        #: the latest put waiting for limits to be asked for (later puts wait behind it)
        self._gate: asyncio.Task[PendingPut] | None = None
        #: a put waiting for limits that could not be prepared (a corrupt batch): every later put
        #: fails with it, as a put prepared at once would have failed the task before the next
        self._broken: asyncio.Task[PendingPut] | None = None

    def learn_ahead(self, partitions: Iterable[TopicPartition]) -> None:
        """Ask the limits of ``partitions``' target topics now (the task starts), before the first
        put needs them (:meth:`TargetLimits.ask_ahead`)."""
        if self.limits is not None:
            self.limits.ask_ahead(self.target_partition(tp).topic for tp in partitions)

    @property
    def throttles(self) -> Throttles:
        """The target brokers' quota throttling of this sink's producer (its THROTTLED)."""
        return self.producer.pipeline.throttles

    def target_partition(self, tp: TopicPartition) -> TopicPartition:
        name = self._names.get(tp.topic)
        if name is None:
            name = self._names[tp.topic] = self.rename(tp.topic)
        return TopicPartition(name, tp.partition)

    def submit(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> PendingPut | DeferredPut:
        """Hand every batch to the producer and return at once; the producer keeps the order per
        partition across calls, so the next fetch may be submitted before this one is answered.
        Raises ``CorruptBatchError`` (nothing is sent) if a batch to be merged or split is corrupt.
        A put to a target topic whose limit is not known yet is handed over once it is (and so is
        every put after it, in order)."""
        if self._broken is not None:  # an earlier put could not be prepared: nothing after it
            return DeferredPut(self._broken)
        unknown = [] if self.limits is None else self.limits.unknown(
            self.target_partition(tp).topic for tp, _ in work)
        if not unknown and self._gate is None:
            return self._submit_now(work)
        before, limits = self._gate, self.limits
        assert limits is not None or before is not None

        async def later() -> PendingPut:
            if before is not None:
                await before  # its failure (a corrupt batch) is this put's too: nothing after a gap
            if limits is not None:
                await limits.learn(limits.unknown(self.target_partition(tp).topic for tp, _ in work))
            return self._submit_now(work)

        gate = self._gate = asyncio.ensure_future(later())
        gate.add_done_callback(self._opened)
        return DeferredPut(gate)

    def _opened(self, gate: asyncio.Task[PendingPut]) -> None:
        if not gate.cancelled() and gate.exception() is not None:
            self._broken = gate
        if self._gate is gate:
            self._gate = None

    def _submit_now(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> PendingPut:
        items: list[tuple[TopicPartition, Outgoing]] = []
        held: dict[TopicPartition, RefusedRecord | None] = {}
        for tp, batches in work:
            if tp in self._held:
                held[tp] = None  # named by the put that found it
                continue
            topic = self.target_partition(tp).topic
            limit = self.limits.limit(topic) if self.limits is not None else None
            out, unfit = fit(prepare(batches, self.coalescing, limit), limit)
            items.extend((tp, o) for o in out)
            if unfit is not None:
                held[tp] = self._held[tp] = RefusedRecord(tp, topic, unfit.offset, unfit.size, unfit.limit)
        # MirrorSource hands over only CRC-verified batches and rebuilt, merged or split ones are
        # built here with a fresh CRC, as the producer's submit requires
        targets = [self.target_partition(tp) for tp, _ in items]
        produced = [(ttp, o.batch) for ttp, (_, o) in zip(targets, items, strict=True)]
        submission = self.producer.submit(produced)
        return PendingPut(items, submission, held, self.limits, targets)

    async def put(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> list[Delivered]:
        """:meth:`submit` and wait: what was acknowledged, or :class:`SinkError`."""
        pending = self.submit(work)
        await pending.wait()
        try:
            return pending.result()
        except SinkError:
            self.recover()
            raise

    def recover(self) -> None:
        """After a failed put was seen (and every put submitted after it is answered): the failed
        partitions may be produced again, from what was acknowledged (a held partition too: the
        task has decided what to do about its record)."""
        self._held.clear()
        self.producer.resume()

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        targets = {tp: self.target_partition(tp) for tp in partitions}
        ends = await self.producer.cluster.list_offsets(list(targets.values()), LATEST,
                                                        partial_after=START_LOOKUP_SECONDS)
        return {tp: ends[ttp] for tp, ttp in targets.items() if ttp in ends}

    async def close(self) -> None:
        if self._gate is not None:
            self._gate.cancel()
        await self.producer.close()
        if self.owns_cluster:
            await self.producer.cluster.close()


class PendingPut:
    """One :meth:`MirrorSink.submit`: its batches and the producer's :class:`Submission` of them."""

    def __init__(
        self, items: list[tuple[TopicPartition, Outgoing]], submission: Submission,
        held: dict[TopicPartition, RefusedRecord | None] | None = None, limits: TargetLimits | None = None,
        targets: list[TopicPartition] | None = None,
    ) -> None:
        self._items = items
        self._submission = submission
        #: partitions of this put held at a record the target refuses (the record, where found)
        self._held = held or {}
        self._limits = limits
        self._targets = targets  # each item's target partition (needed with ``limits`` only)

    async def wait(self) -> None:
        await self._submission.wait()

    def done(self) -> bool:
        return self._submission.done()

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        self._submission.add_done_callback(fn)

    def result(self) -> list[Delivered]:
        """What was acknowledged (a prefix per partition), once :meth:`done`; raises
        :class:`SinkError` carrying it when not everything was: ``restart`` when a failed
        partition may hold batches past its prefix (only the target can tell what it holds)."""
        acked = self._submission.result()
        delivered = [
            Delivered(tp, o.first, o.last, o.source_next, base, o.record_offsets, o.batch.size,
                      o.batch.records_count, o.batch.max_timestamp, o.split)
            for (tp, o), base in zip(self._items, acked.offsets, strict=True)
            if base >= 0  # not acknowledged otherwise (a prefix per partition is)
        ]
        self._too_large(acked.offsets, acked.failures)
        cause = acked.cause
        refused = [r for r in self._held.values() if r is not None]
        if cause is not None:
            restart = acked.in_doubt or isinstance(cause, ResendRefusedError)
            causes: dict[TopicPartition, tuple[TopicPartition, BaseException]] = {}
            if self._targets is not None:
                for (tp, _), ttp in zip(self._items, self._targets, strict=True):
                    if (failure := acked.failures.get(ttp)) is not None:
                        causes.setdefault(tp, (ttp, failure.cause))
            raise SinkError(f"{type(cause).__name__}: {cause}", delivered, restart=restart,
                            refused=refused, partitions=list(acked.failures), causes=causes) from cause
        if self._held:
            held = ", ".join(str(tp) for tp in self._held)
            raise SinkError(f"held at a record the target refuses as too large: {held}", delivered,
                            refused=refused, partitions=list(self._held))
        return delivered

    def _too_large(self, offsets: list[int], failures: Mapping[TopicPartition, PartitionFailure]) -> None:
        """Each target topic that refused a batch as too large is asked for its limit again."""
        if self._limits is None or self._targets is None:
            return
        for ttp, failure in failures.items():
            cause = failure.cause
            if isinstance(cause, BrokerError) and cause.code in TOO_LARGE:
                refused = next((o.batch.size for t, (_, o), base in zip(
                    self._targets, self._items, offsets, strict=True) if t == ttp and base < 0), None)
                if refused is not None:
                    self._limits.refused(ttp.topic, refused)


class DeferredPut:
    """A put handed to the producer once the limits it needs are known (:meth:`MirrorSink.submit`):
    the :class:`PendingPut` it becomes, with the same answers."""

    def __init__(self, gate: asyncio.Task[PendingPut]) -> None:
        self._gate = gate

    def _put(self) -> PendingPut | None:
        """The put, once handed over (None before, or if preparing it failed)."""
        gate = self._gate
        if not gate.done() or gate.cancelled() or gate.exception() is not None:
            return None
        return gate.result()

    def done(self) -> bool:
        if not self._gate.done():
            return False
        put = self._put()
        return put is None or put.done()

    async def wait(self) -> None:
        await asyncio.wait({self._gate})
        if (put := self._put()) is not None:
            await put.wait()

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        def handed(_gate: asyncio.Task[PendingPut]) -> None:
            put = self._put()
            if put is None:
                fn()
            else:
                put.add_done_callback(fn)

        self._gate.add_done_callback(handed)

    def result(self) -> list[Delivered]:
        """The put's result; what preparing it raised (a corrupt batch), if it did."""
        return self._gate.result().result()
