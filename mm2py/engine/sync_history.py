"""The sync history: the offset syncs that translate any source offset still within the source's
retention, kept on a compacted topic of mm2py's own (pure rules).

Why: MM2's offset-syncs topic is compacted with one key per partition, so compaction leaves a
partition's newest sync and drops the rest; a consumer far behind then lies before the oldest sync
left, and cannot be translated (MM2 keeps a bounded window in memory too). mm2py writes that topic
unchanged, for MM2's tools, and writes each **run sync** (``engine/offset_syncs.py``: the first
record after a (re)start or a gap, where ``D - U`` changes) a second time to
``mm2py-offset-sync-history.<alias>.internal``, keyed by partition *and* upstream offset
(``HistorySync``): compaction keeps every one. Run syncs alone translate exactly (a sync inside a
run adds nothing), so the history grows with the gaps of the source (aborted transactions, markers,
compaction) and with restarts, not with its records.

**Fold** (:meth:`SyncHistory.add`, records in topic order): a sync sets its point, a tombstone
removes it. A sync below a partition's newest point means the partition was mirrored again from
there (offsets reset, the source topic re-created): the points after it are *stale*, dropped as
:class:`~mm2py.engine.offset_syncs.OffsetSyncStore` drops them, and remembered for pruning.
Compaction keeps the order of the records it keeps, and a key written again replaces the earlier
record of the key, so the fold of a compacted topic equals the fold of the whole one.

**Pruning** (:meth:`SyncHistory.obsolete`): once the source's log start ``L`` passed them, points
before the newest point ``U <= L`` translate nothing a consumer can still be at (every offset from
``L`` on is translated by that point or a later one); they and the stale points get tombstones.

**Reading** (:func:`merged`): a partition's history together with what the MM2 topic still holds
(what an earlier mm2py, or this one before the history was turned on, left there).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from mm2py.protocol.mm2_records import HistorySync
from mm2py.protocol.types import TopicPartition

__all__ = ["SyncHistory", "merged"]


class SyncHistory:
    """The sync history's points per source partition, folded from its records in topic order."""

    def __init__(self) -> None:
        self._points: dict[TopicPartition, dict[int, int]] = {}
        self._newest: dict[TopicPartition, int] = {}
        self._stale: dict[TopicPartition, set[int]] = {}

    def add(self, record: HistorySync) -> None:
        tp, u = record.topic_partition, record.upstream_offset
        points = self._points.setdefault(tp, {})
        stale = self._stale.setdefault(tp, set())
        stale.discard(u)
        if record.downstream_offset is None:  # a tombstone
            points.pop(u, None)
            return
        newest = self._newest.get(tp)
        if newest is not None and u < newest:  # mirrored again from u: later points are stale
            later = [k for k in points if k > u]
            for k in later:
                del points[k]
            stale.update(later)
        points[u] = record.downstream_offset
        self._newest[tp] = u

    def partitions(self) -> list[TopicPartition]:
        return sorted(tp for tp, points in self._points.items() if points)

    def syncs(self, tp: TopicPartition) -> list[tuple[int, int]]:
        """``(upstream, downstream)`` of the partition's points, by upstream offset."""
        return sorted(self._points.get(tp, {}).items())

    def obsolete(self, tp: TopicPartition, log_start: int | None) -> list[int]:
        """The upstream offsets of the partition's points to tombstone: the stale ones and, given
        the source's log start, those before the newest point at or below it."""
        out = set(self._stale.get(tp, ()))
        if log_start is not None:
            ups = sorted(self._points.get(tp, {}))
            keep_from = bisect.bisect_right(ups, log_start) - 1
            out.update(ups[:max(keep_from, 0)])
        return sorted(out)

    def size(self) -> int:
        """Points and stale points held (what the topic holds once compacted)."""
        return sum(map(len, self._points.values())) + sum(map(len, self._stale.values()))


def merged(history: Sequence[tuple[int, int]], older: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """A partition's syncs to translate with, by upstream offset: its history's points and the
    ``older`` syncs (the offset-syncs topic's, folded) beside them, the history's point winning at
    the same upstream offset. Each fold keeps only syncs of the partition's current mirroring, so
    the two agree and every sync they add is exact: the offset-syncs topic fills in what the
    history lacks (before it began, or while it was turned off)."""
    out = dict(older)
    out.update(history)
    return sorted(out.items())
