"""Exact resume: skip the batches that reached the target after the last progress commit.

A worker that dies between delivering batches and committing its position would, like MM2,
mirror those batches again on restart. mm2py stores with each position the target end offset
it maps to, so on restart it reads the target partition from there and walks it in lockstep
with the source from the stored position, preparing each source batch exactly as the mirror
would (crop, read_committed filter, compaction rebuild). Every target batch whose records are
byte-for-byte those of the next source batch (attributes, timestamps and records; producer
fields excepted, the mirror replaces them) is already mirrored, so the source position moves past
it. The first difference, or the end of the target, ends the walk: nothing is ever skipped that
the target does not hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from connectors.mirror_source import MirrorSource
from mm2py.client.cluster import LATEST, ClusterClient
from mm2py.client.fetcher import FetcherConfig, RawFetcher
from mm2py.engine.task_api import Delivered
from mm2py.protocol.api_fetch import READ_UNCOMMITTED
from mm2py.protocol.batch_edit import rebuild_contiguous
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.records import ATTR_TRANSACTIONAL, RecordBatch
from mm2py.protocol.types import TopicPartition

log = logging.getLogger(__name__)


def same_records(source: RecordBatch, target: RecordBatch) -> bool:
    """True if ``target`` holds exactly the records of ``source`` as the mirror writes them."""
    if source.attributes & ~ATTR_TRANSACTIONAL != target.attributes & ~ATTR_TRANSACTIONAL:
        return False
    s, t = source.buf, target.buf
    # lastOffsetDelta, baseTimestamp, maxTimestamp | recordsCount and the records
    return s[23:43] == t[23:43] and s[57:] == t[57:]


class TailReconciler:
    def __init__(
        self,
        source: MirrorSource,
        target: ClusterClient,
        rename: Callable[[str], str],
        *,
        max_batches: int = 100_000,
    ) -> None:
        self.source = source
        self.target = target
        self.rename = rename
        self.max_batches = max_batches
        self._fetcher = RawFetcher(target, FetcherConfig(isolation_level=READ_UNCOMMITTED, max_wait_ms=0))

    async def __call__(self, tp: TopicPartition, stored: Position) -> tuple[Position, list[Delivered]]:
        if stored.target is None:
            return stored, []
        ttp = TopicPartition(self.rename(tp.topic), tp.partition)
        try:
            end = (await self.target.list_offsets([ttp], LATEST))[ttp]
        except Exception as exc:  # target topic gone or unreachable: plain at-least-once resume
            log.warning("%s: cannot read the target tail (%s); resuming at %d", tp, exc, stored.source)
            return Position(stored.source, None), []
        pos_s, pos_t = stored.source, stored.target
        if end < pos_t:
            log.warning("%s: target %s ends at %d, below the committed %d", tp, ttp, end, pos_t)
            return Position(pos_s, None), []
        already: list[Delivered] = []
        while pos_t < end and len(already) < self.max_batches:
            fetched = (await self._fetcher.fetch({ttp: pos_t})).get(ttp)
            if fetched is None or not fetched.ok or not fetched.batches:
                break
            polled = (await self.source.poll({tp: pos_s})).get(tp)
            if polled is None or not polled.batches:
                break
            matched = 0
            for tb, sb in zip(fetched.batches, polled.batches, strict=False):
                offsets: list[int] | None = None
                prepared = sb
                if not sb.is_contiguous():
                    prepared, offsets = rebuild_contiguous(sb)
                if not same_records(prepared, tb):
                    log.info("%s: target batch at %d differs from source at %d: stop skipping",
                             tp, tb.base_offset, sb.base_offset)
                    return Position(pos_s, pos_t), already
                first = offsets[0] if offsets else sb.base_offset
                last = offsets[-1] if offsets else sb.last_offset
                already.append(Delivered(tp, first, last, sb.next_offset, tb.base_offset, offsets,
                                         tb.size, tb.records_count))
                pos_s, pos_t = sb.next_offset, tb.next_offset
                matched += 1
            if matched == len(polled.batches):
                pos_s = max(pos_s, polled.next_offset)  # a filtered stretch after the last batch
        return Position(pos_s, pos_t), already
