"""Exact resume: skip the batches that reached the target after the last progress commit.

A worker that dies between delivering batches and committing its position would, like MM2,
mirror those batches again on restart. mm2py stores with each position the target end offset
it maps to, so on restart it reads the target partition from there and walks it in lockstep
with the source from the stored position, preparing each source batch exactly as the mirror
would (crop, read_committed filter, compaction rebuild). A target batch may hold one source batch
or, when the mirror merged small batches (``mm2py.coalesce.*``), a run of consecutive ones:
:func:`mm2py.protocol.batch_merge.match_run` says how many of the next source batches it holds
exactly (attributes, timestamps and records; producer fields excepted, the mirror replaces them),
whatever coalescing settings and fetch boundaries were in force when it was written; or the first
records of one, when the mirror split a batch too large for the target
(:func:`mm2py.protocol.batch_split.piece_of`: the rest of it is matched against the next target
batches). Those source batches are already mirrored, so the source position moves past them. The
first difference, or the end of the target, ends the walk: nothing is ever skipped that the
target does not hold. A target that ends below the committed target end is answered with its end
as the position's target end, unwalked: the task names it (``target.truncated``) before producing
anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from mm2py.client.cluster import LATEST, ClusterClient
from mm2py.client.fetcher import FetcherConfig, RawFetcher
from mm2py.connectors.mirror_source import MirrorSource
from mm2py.engine.task_contract import Delivered
from mm2py.protocol.api_fetch import READ_UNCOMMITTED
from mm2py.protocol.batch_edit import rebuild_contiguous
from mm2py.protocol.batch_merge import match_run, same_content
from mm2py.protocol.batch_split import piece_of
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Prepared:
    """A source batch as the mirror hands it to coalescing (rebuilt when it has gaps)."""

    batch: RecordBatch
    offsets: list[int] | None  # each record's source offset, when rebuilt
    next_offset: int  # the source position after the original batch


class _SourceWindow:
    """A partition's source batches from a position on, prepared, fetched as they are needed."""

    def __init__(self, source: MirrorSource, tp: TopicPartition, start: int) -> None:
        self.source = source
        self.tp = tp
        self.pending: list[_Prepared] = []
        self.next = start  # where the next source fetch starts (past filtered batches too)

    async def fill(self, records: int) -> bool:
        """Hold at least ``records`` records; False when the source has no more to give."""
        while sum(p.batch.records_count for p in self.pending) < records:
            polled = (await self.source.poll({self.tp: self.next}, sessions=False)).get(self.tp)
            if polled is None or polled.reset_to is not None or polled.next_offset <= self.next:
                return False
            for sb in polled.batches:
                if sb.next_offset <= self.next:
                    continue
                if sb.is_contiguous():
                    self.pending.append(_Prepared(sb, None, sb.next_offset))
                else:
                    rebuilt, offsets = rebuild_contiguous(sb)
                    if offsets:
                        self.pending.append(_Prepared(rebuilt, offsets, sb.next_offset))
            self.next = polled.next_offset
        return True

    def match(self, target: RecordBatch) -> list[_Prepared]:
        """Take the leading source batches ``target`` holds (none if it holds something else)."""
        if not self.pending:
            return []
        if self.pending[0].offsets is not None:
            candidates = self.pending[:1]  # a rebuilt batch is never merged with others
        else:
            candidates = []
            for p in self.pending:
                if p.offsets is not None:
                    break
                candidates.append(p)
        k = match_run(target, [p.batch for p in candidates])
        if k == 0:
            return self._piece(target)
        taken, self.pending = self.pending[:k], self.pending[k:]
        return taken

    def _piece(self, target: RecordBatch) -> list[_Prepared]:
        """Take the first records of the leading source batch when ``target`` holds them as the
        mirror's split writes them (the rest of the batch stays pending); none otherwise."""
        head, n = self.pending[0], target.records_count
        if not 0 < n < head.batch.records_count:
            return []
        taken = piece_of(head.batch, 0, n)
        if not same_content(taken, target):
            return []
        offsets = head.offsets
        rest = piece_of(head.batch, n, head.batch.records_count)
        self.pending[0] = _Prepared(rest, offsets[n:] if offsets is not None else None, head.next_offset)
        last = offsets[n - 1] if offsets is not None else taken.last_offset
        return [_Prepared(taken, offsets[:n] if offsets is not None else None, last + 1)]


def _delivered(tp: TopicPartition, run: list[_Prepared], tb: RecordBatch) -> Delivered:
    if len(run) == 1 and run[0].offsets is not None:
        offsets = run[0].offsets
        first, last = offsets[0], offsets[-1]
    else:
        offsets = None
        first, last = run[0].batch.base_offset, run[-1].batch.last_offset
    return Delivered(tp, first, last, run[-1].next_offset, tb.base_offset, offsets, tb.size,
                     tb.records_count)


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

    async def __call__(self, tp: TopicPartition, stored: Position,
                       end: int | None = None) -> tuple[Position, list[Delivered]]:
        """``end``: the target partition's end, when the task's start read it already."""
        if stored.target is None:
            return stored, []
        ttp = TopicPartition(self.rename(tp.topic), tp.partition)
        try:
            if end is None:
                end = (await self.target.list_offsets([ttp], LATEST))[ttp]
        except Exception as exc:  # target topic gone or unreachable: plain at-least-once resume
            log.warning("%s: cannot read the target tail (%s); resuming at %d", tp, exc, stored.source)
            return Position(stored.source, None), []
        pos_s, pos_t = stored.source, stored.target
        if end < pos_t:  # truncated or created again: the task's alarm (target.truncated) says so
            return Position(pos_s, end), []
        already: list[Delivered] = []
        window = _SourceWindow(self.source, tp, pos_s)
        while pos_t < end and len(already) < self.max_batches:
            fetched = (await self._fetcher.fetch({ttp: pos_t})).get(ttp)
            if fetched is None or not fetched.ok or not fetched.batches:
                break
            for tb in fetched.batches:
                if not await window.fill(tb.records_count):
                    return Position(pos_s, pos_t), already
                run = window.match(tb)
                if not run:
                    log.info("%s: target batch at %d differs from source at %d: stop skipping",
                             tp, tb.base_offset, pos_s)
                    return Position(pos_s, pos_t), already
                already.append(_delivered(tp, run, tb))
                pos_s, pos_t = run[-1].next_offset, tb.next_offset
                if not window.pending:
                    pos_s = max(pos_s, window.next)  # a filtered stretch after the last batch
        return Position(pos_s, pos_t), already
