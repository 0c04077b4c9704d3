"""MirrorSink: the produce side of a mirror task (raw record batches to target partitions).

Source partition ``t-p`` goes to target partition ``<policy-renamed t>-p``. A batch leaves as it
came, except for what a stock broker requires: baseOffset 0 and no foreign producer state
(done by :class:`mm2py.client.producer.RawProducer`, a CRC recompute and no decompression), and a
contiguous offset range — a batch with compaction gaps is rebuilt here, and the original source
offset of each record is kept so offset syncs stay exact. Runs of small batches are merged into
larger ones (``mm2py.coalesce.*``, :mod:`connectors.outgoing`); a merged batch covers several source
batches, and its :class:`Delivered` says so (source range, source position after it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from connectors.outgoing import CoalesceSettings, Outgoing, ResendPlan, prepare
from mm2py.client.cluster import LATEST
from mm2py.client.errors import ResendRefusedError
from mm2py.client.producer import RawProducer
from mm2py.client.producer.pipeline import PartitionHaltedError, acknowledged_prefix
from mm2py.engine.task_api import START_LOOKUP_SECONDS, Delivered, SinkError
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

log = logging.getLogger(__name__)

#: one partition's share of a put: (source partition, batches to produce, held back, prepared with
#: the re-send ranges of earlier failed puts, which its own outcome then replaces)
Plan = tuple[TopicPartition, list[Outgoing], bool, bool]


class MirrorSink:
    def __init__(
        self,
        producer: RawProducer,
        rename: Callable[[str], str],
        coalescing: CoalesceSettings | None = None,
    ) -> None:
        self.producer = producer
        self.rename = rename
        self.coalescing = coalescing  # None or not enabled: every batch as it came
        self._names: dict[str, str] = {}
        self._resend = ResendPlan.empty()

    def target_partition(self, tp: TopicPartition) -> TopicPartition:
        name = self._names.get(tp.topic)
        if name is None:
            name = self._names[tp.topic] = self.rename(tp.topic)
        return TopicPartition(name, tp.partition)

    def submit(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> PendingPut:
        """Hand every batch to the producer and return at once; the producer keeps the order per
        partition across calls, so the next fetch may be submitted before this one is answered.
        Raises ``CorruptBatchError`` (nothing is sent) if a batch to be merged is corrupt."""
        plans: list[Plan] = []
        for tp, batches in work:
            chosen, cuts, held_back = self._resend.cuts(tp, batches)
            plans.append((tp, prepare(chosen, self.coalescing, cuts), held_back, bool(cuts) or held_back))
        items = [(tp, o) for tp, outgoing, _, _ in plans for o in outgoing]
        # MirrorSource hands over only CRC-verified batches and rebuilt or merged ones are built
        # here, so the producer does not check each CRC a second time before stamping a new one
        futures = self.producer.submit(
            [(self.target_partition(tp), o.batch) for tp, o in items], verified=True
        )
        return PendingPut(self, plans, items, futures)

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
        partitions may be produced again, from what was acknowledged."""
        self.producer.resume()

    def _settle(self, plans: list[Plan], bases: list[int]) -> None:
        i = 0
        for tp, outgoing, held_back, cut in plans:
            got = bases[i : i + len(outgoing)]
            i += len(outgoing)
            acked = next((k for k, b in enumerate(got) if b < 0), len(got))
            self._resend.settle(tp, outgoing, acked, held_back, replace=cut)

    def _outcome(
        self, plans: list[Plan], items: list[tuple[TopicPartition, Outgoing]],
        bases: list[int], error: BaseException | None,
    ) -> list[Delivered]:
        self._settle(plans, bases)
        delivered = [
            Delivered(tp, o.first, o.last, o.source_next, base, o.record_offsets, o.batch.size,
                      o.batch.records_count, o.batch.max_timestamp)
            for (tp, o), base in zip(items, bases, strict=True)
            if base >= 0  # not acknowledged otherwise (a prefix per partition is)
        ]
        if error is not None:
            restart = isinstance(error, ResendRefusedError)
            raise SinkError(f"{type(error).__name__}: {error}", delivered, restart=restart) from error
        held = [tp for tp, _, held_back, _ in plans if held_back]
        if held:
            # batches held back so that unacknowledged ones are re-sent as they were: fetch again
            raise SinkError(f"re-sending unacknowledged batches of {held}: fetching again", delivered)
        return delivered

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        targets = {tp: self.target_partition(tp) for tp in partitions}
        ends = await self.producer.cluster.list_offsets(list(targets.values()), LATEST,
                                                        partial_after=START_LOOKUP_SECONDS)
        return {tp: ends[ttp] for tp, ttp in targets.items() if ttp in ends}

    async def close(self) -> None:
        await self.producer.close()
        await self.producer.cluster.close()


class PendingPut:
    """One :meth:`MirrorSink.submit`: its batches' acknowledgements, read in submission order."""

    def __init__(
        self, sink: MirrorSink, plans: list[Plan],
        items: list[tuple[TopicPartition, Outgoing]], futures: list[asyncio.Future[int]],
    ) -> None:
        self._sink = sink
        self._plans = plans
        self._items = items
        #: done once every batch is answered (acknowledged or failed)
        self.answered: asyncio.Future[list[int | BaseException]] = asyncio.gather(
            *futures, return_exceptions=True
        )

    async def wait(self) -> None:
        await asyncio.shield(self.answered)

    def done(self) -> bool:
        return self.answered.done()

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        self.answered.add_done_callback(lambda _answered: fn())

    def result(self) -> list[Delivered]:
        """What was acknowledged (a prefix per partition), once :meth:`done`; raises
        :class:`SinkError` carrying it when not everything was. Call once per put, in order."""
        bases, failed = acknowledged_prefix([tp for tp, _ in self._items], self.answered.result())
        # the broker's or the connection's error first; "halted" only says an earlier put failed
        causes = list(failed.values())
        error = next((c for c in causes if not isinstance(c, PartitionHaltedError)), next(iter(causes), None))
        return self._sink._outcome(self._plans, self._items, bases, error)
