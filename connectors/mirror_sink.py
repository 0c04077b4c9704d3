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
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from mm2py.client.cluster import LATEST
from mm2py.client.errors import ResendRefusedError
from mm2py.client.producer import RawProducer, Submission
from mm2py.connectors.outgoing import CoalesceSettings, Outgoing, prepare
from mm2py.engine.task_contract import START_LOOKUP_SECONDS, Delivered, SinkError
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
    ) -> None:
        self.producer = producer
        #: False when the producer's cluster client is shared with other tasks (left open on close)
        self.owns_cluster = owns_cluster
        self.rename = rename
        self.coalescing = coalescing  # None or not enabled: every batch as it came
        self._names: dict[str, str] = {}

    def target_partition(self, tp: TopicPartition) -> TopicPartition:
        name = self._names.get(tp.topic)
        if name is None:
            name = self._names[tp.topic] = self.rename(tp.topic)
        return TopicPartition(name, tp.partition)

    def submit(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> PendingPut:
        """Hand every batch to the producer and return at once; the producer keeps the order per
        partition across calls, so the next fetch may be submitted before this one is answered.
        Raises ``CorruptBatchError`` (nothing is sent) if a batch to be merged is corrupt."""
        items = [(tp, o) for tp, batches in work for o in prepare(batches, self.coalescing)]
        # MirrorSource hands over only CRC-verified batches and rebuilt or merged ones are built
        # here with a fresh CRC, as the producer's submit requires
        submission = self.producer.submit([(self.target_partition(tp), o.batch) for tp, o in items])
        return PendingPut(items, submission)

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

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        targets = {tp: self.target_partition(tp) for tp in partitions}
        ends = await self.producer.cluster.list_offsets(list(targets.values()), LATEST,
                                                        partial_after=START_LOOKUP_SECONDS)
        return {tp: ends[ttp] for tp, ttp in targets.items() if ttp in ends}

    async def close(self) -> None:
        await self.producer.close()
        if self.owns_cluster:
            await self.producer.cluster.close()


class PendingPut:
    """One :meth:`MirrorSink.submit`: its batches and the producer's :class:`Submission` of them."""

    def __init__(self, items: list[tuple[TopicPartition, Outgoing]], submission: Submission) -> None:
        self._items = items
        self._submission = submission

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
                      o.batch.records_count, o.batch.max_timestamp)
            for (tp, o), base in zip(self._items, acked.offsets, strict=True)
            if base >= 0  # not acknowledged otherwise (a prefix per partition is)
        ]
        cause = acked.cause
        if cause is not None:
            restart = acked.in_doubt or isinstance(cause, ResendRefusedError)
            raise SinkError(f"{type(cause).__name__}: {cause}", delivered, restart=restart) from cause
        return delivered
