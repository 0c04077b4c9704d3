"""MirrorSink: the produce side of a mirror task (raw record batches to target partitions).

Source partition ``t-p`` goes to target partition ``<policy-renamed t>-p``. A batch leaves as it
came, except for what a stock broker requires: baseOffset 0 and no foreign producer state
(done by :class:`mm2py.client.producer.RawProducer`, a CRC recompute and no decompression), and a
contiguous offset range — a batch with compaction gaps is rebuilt here, and the original source
offset of each record is kept so offset syncs stay exact.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from mm2py.client.cluster import LATEST
from mm2py.client.producer import ProduceError, RawProducer
from mm2py.engine.task_api import Delivered, SinkError
from mm2py.protocol.batch_edit import rebuild_contiguous
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

log = logging.getLogger(__name__)


class MirrorSink:
    def __init__(self, producer: RawProducer, rename: Callable[[str], str]) -> None:
        self.producer = producer
        self.rename = rename
        self._names: dict[str, str] = {}

    def target_partition(self, tp: TopicPartition) -> TopicPartition:
        name = self._names.get(tp.topic)
        if name is None:
            name = self._names[tp.topic] = self.rename(tp.topic)
        return TopicPartition(name, tp.partition)

    async def put(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> list[Delivered]:
        """Produce every batch, in order per partition; the producer sends them in rounds (the k-th
        batch of every partition together), several rounds in flight when it is idempotent."""
        items: list[tuple[TopicPartition, RecordBatch, Sequence[int] | None, int]] = []
        for tp, batches in work:
            for b in batches:
                offsets: Sequence[int] | None = None
                original = b
                if not b.is_contiguous():
                    b, offsets = rebuild_contiguous(b)
                    if not offsets:
                        continue  # every record compacted away: nothing to write
                items.append((tp, b, offsets, original.next_offset))
        try:
            # MirrorSource hands over only CRC-verified batches and rebuilt ones are built here, so
            # the producer does not check each CRC a second time before stamping a new one
            bases = await self.producer.produce(
                [(self.target_partition(tp), b) for tp, b, _, _ in items], verified=True
            )
            error: BaseException | None = None
        except ProduceError as exc:
            bases, error = exc.offsets, exc
        except Exception as exc:
            raise SinkError(f"{type(exc).__name__}: {exc}", []) from exc
        delivered: list[Delivered] = []
        for (tp, b, offsets, source_next), base in zip(items, bases, strict=True):
            if base < 0:
                continue  # not acknowledged (a prefix per partition is)
            first = offsets[0] if offsets else b.base_offset
            last = offsets[-1] if offsets else b.last_offset
            delivered.append(Delivered(tp, first, last, source_next, base, offsets, b.size, b.records_count))
        if error is not None:
            raise SinkError(f"{type(error).__name__}: {error}", delivered) from error
        return delivered

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        targets = {tp: self.target_partition(tp) for tp in partitions}
        ends = await self.producer.cluster.list_offsets(list(targets.values()), LATEST)
        return {tp: ends[ttp] for tp, ttp in targets.items()}

    async def close(self) -> None:
        await self.producer.cluster.close()
