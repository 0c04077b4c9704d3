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

import logging
from collections.abc import Callable, Sequence

from connectors.outgoing import CoalesceSettings, Outgoing, ResendPlan, prepare
from mm2py.client.cluster import LATEST
from mm2py.client.producer import ProduceError, RawProducer
from mm2py.engine.task_api import Delivered, SinkError
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

log = logging.getLogger(__name__)


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

    async def put(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> list[Delivered]:
        """Produce every batch, in order per partition; the producer sends them in rounds (the k-th
        batch of every partition together), several rounds in flight when it is idempotent."""
        plans: list[tuple[TopicPartition, list[Outgoing], bool]] = []
        for tp, batches in work:
            chosen, cuts, held_back = self._resend.cuts(tp, batches)
            plans.append((tp, prepare(chosen, self.coalescing, cuts), held_back))
        items = [(tp, o) for tp, outgoing, _ in plans for o in outgoing]
        try:
            # MirrorSource hands over only CRC-verified batches and rebuilt or merged ones are built
            # here, so the producer does not check each CRC a second time before stamping a new one
            bases = await self.producer.produce(
                [(self.target_partition(tp), o.batch) for tp, o in items], verified=True
            )
            error: BaseException | None = None
        except ProduceError as exc:
            bases, error = exc.offsets, exc
        except Exception as exc:
            self._settle(plans, [-1] * len(items))
            raise SinkError(f"{type(exc).__name__}: {exc}", []) from exc
        self._settle(plans, bases)
        delivered = [
            Delivered(tp, o.first, o.last, o.source_next, base, o.record_offsets, o.batch.size,
                      o.batch.records_count)
            for (tp, o), base in zip(items, bases, strict=True)
            if base >= 0  # not acknowledged otherwise (a prefix per partition is)
        ]
        if error is not None:
            raise SinkError(f"{type(error).__name__}: {error}", delivered) from error
        held = [tp for tp, _, held_back in plans if held_back]
        if held:
            # batches held back so that unacknowledged ones are re-sent as they were: fetch again
            raise SinkError(f"re-sending unacknowledged batches of {held}: fetching again", delivered)
        return delivered

    def _settle(self, plans: list[tuple[TopicPartition, list[Outgoing], bool]], bases: list[int]) -> None:
        i = 0
        for tp, outgoing, held_back in plans:
            got = bases[i : i + len(outgoing)]
            i += len(outgoing)
            acked = next((k for k, b in enumerate(got) if b < 0), len(got))
            self._resend.settle(tp, outgoing, acked, held_back)

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        targets = {tp: self.target_partition(tp) for tp in partitions}
        ends = await self.producer.cluster.list_offsets(list(targets.values()), LATEST)
        return {tp: ends[ttp] for tp, ttp in targets.items()}

    async def close(self) -> None:
        await self.producer.cluster.close()
