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

from mm2py.client.producer import RawProducer
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
        """Produce round by round: round k carries the k-th batch of every partition."""
        queues: list[list[tuple[TopicPartition, RecordBatch, Sequence[int] | None, int]]] = []
        for tp, batches in work:
            items = []
            for b in batches:
                offsets: Sequence[int] | None = None
                original = b
                if not b.is_contiguous():
                    b, offsets = rebuild_contiguous(b)
                    if not offsets:
                        continue  # every record compacted away: nothing to write
                items.append((tp, b, offsets, original.next_offset))
            queues.append(items)
        delivered: list[Delivered] = []
        depth = max((len(q) for q in queues), default=0)
        for k in range(depth):
            rnd = [q[k] for q in queues if k < len(q)]
            try:
                bases = await self.producer.produce(
                    [(self.target_partition(tp), b) for tp, b, _, _ in rnd]
                )
            except Exception as exc:
                raise SinkError(f"{type(exc).__name__}: {exc}", delivered) from exc
            for (tp, b, offsets, source_next), base in zip(rnd, bases, strict=True):
                first = offsets[0] if offsets else b.base_offset
                last = offsets[-1] if offsets else b.last_offset
                delivered.append(Delivered(
                    tp, first, last, source_next, base, offsets, b.size, b.records_count,
                ))
        return delivered

    async def close(self) -> None:
        await self.producer.cluster.close()
