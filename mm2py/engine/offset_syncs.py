"""When to emit offset syncs, and how to translate offsets with them exactly.

mm2py copies whole batches, so it learns the target offset of every mirrored source batch from the
Produce response. Inside a contiguous batch the mapping is linear: source ``s`` lands at
``target_first + (s - source_first)``. It stops being linear only where the source skips offsets the
target does not: aborted transactional batches and control batches dropped on the way, compaction
gaps closed by a rebuild. So:

**Emission rule.** For each partition, a sync ``(upstream U, downstream D)`` is emitted

1. for the first record mirrored after (re)start,
2. whenever the offset delta ``D - U`` changes (the record after any gap), and
3. whenever ``offset.lag.max`` upstream offsets have passed since the last sync, so that MM2's own
   readers, which translate to ``sync.downstream + 1`` from the nearest older sync, stay as precise
   as they are with MM2.

Syncs of rules 1 and 2 are **run syncs** (:class:`RunSync`): each starts a run of records with the
same ``D - U``, and they alone make translation exact (a rule-3 sync lies inside a run: the run's
first sync gives the same answer). The MM2-format topic is compacted with one key per partition, so
it forgets older syncs; mm2py keeps the run syncs on a topic of its own as well, one key each (the
sync history, ``engine/sync_history.py``).

**Translation rule.** With syncs sorted by upstream offset, an upstream position ``u`` (the next
offset a consumer would read) translates with the last sync ``(U, D)`` where ``U <= u`` to
``D + (u - U)``, capped at the next sync's ``D'`` (offsets in a gap map to the first target offset
after it) and at the target partition's end offset when the caller knows it (the newest segment
may end in a gap too). Rule 2
makes this exact for every position that has been mirrored: a consumer moved with it neither skips
nor re-reads a record. MM2 readers of the same topic translate conservatively and stay correct.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mm2py.protocol.mm2_records import OffsetSync
from mm2py.protocol.types import TopicPartition


@dataclass(frozen=True, slots=True)
class RunSync(OffsetSync):
    """An offset sync of rule 1 or 2: the first record of a run with the same ``D - U`` (written to
    the sync history as well; encoded as any :class:`OffsetSync`)."""


@dataclass
class _LastSync:
    """A partition's last emitted sync, as the emission rule compares with it."""

    last_upstream: int | None = None
    last_delta: int | None = None


@dataclass
class OffsetSyncPlanner:
    """Decides, batch by batch, which syncs a task must emit (the emission rule above)."""

    offset_lag_max: int = 100
    _last: dict[TopicPartition, _LastSync] = field(default_factory=dict)

    def reset(self, tp: TopicPartition) -> None:
        self._last.pop(tp, None)

    def on_batch(
        self,
        tp: TopicPartition,
        source_first: int,
        source_last: int,
        target_first: int,
        record_offsets: Sequence[int] | None = None,
    ) -> list[OffsetSync]:
        """Syncs to emit for one mirrored batch.

        ``record_offsets`` lists the original source offset of each produced record when a batch
        was rebuilt (compaction gaps); otherwise the batch is contiguous from ``source_first`` to
        ``source_last``.
        """
        st = self._last.setdefault(tp, _LastSync())
        out: list[OffsetSync] = []
        if record_offsets is None:
            self._maybe_emit(tp, st, source_first, target_first, out)
            # rule 3 inside a long contiguous batch: linear, so any offset in it can be the anchor
            while st.last_upstream is not None and source_last - st.last_upstream >= self.offset_lag_max:
                u = st.last_upstream + self.offset_lag_max
                self._emit(tp, st, u, target_first + (u - source_first), out)
        else:
            for i, u in enumerate(record_offsets):
                self._maybe_emit(tp, st, u, target_first + i, out)
        return out

    def _maybe_emit(
        self, tp: TopicPartition, st: _LastSync, u: int, d: int, out: list[OffsetSync]
    ) -> None:
        if st.last_upstream is None or st.last_delta != d - u:
            self._emit(tp, st, u, d, out, run=True)
        elif u - st.last_upstream >= self.offset_lag_max:
            self._emit(tp, st, u, d, out)

    @staticmethod
    def _emit(
        tp: TopicPartition, st: _LastSync, u: int, d: int, out: list[OffsetSync], run: bool = False
    ) -> None:
        st.last_upstream, st.last_delta = u, d - u
        out.append(RunSync(tp, u, d) if run else OffsetSync(tp, u, d))


#: a partition's older syncs, ``(upstream, downstream)`` by upstream offset (the sync history's)
OlderSyncs = Callable[[TopicPartition], Sequence[tuple[int, int]]]


class OffsetSyncStore:
    """Syncs per source partition, read back from an offset-syncs topic; translates offsets.

    ``older``: where to look for an offset before the oldest sync held (the sync history, whose
    points precede what compaction left of the offset-syncs topic)."""

    def __init__(self, max_per_partition: int = 100_000, older: OlderSyncs | None = None) -> None:
        self.max_per_partition = max_per_partition
        self.older = older
        self._upstream: dict[TopicPartition, list[int]] = {}
        self._downstream: dict[TopicPartition, list[int]] = {}

    def add(self, sync: OffsetSync) -> None:
        ups = self._upstream.setdefault(sync.topic_partition, [])
        downs = self._downstream.setdefault(sync.topic_partition, [])
        i = bisect.bisect_left(ups, sync.upstream_offset)
        if i < len(ups) and ups[i] == sync.upstream_offset:
            downs[i] = sync.downstream_offset  # a re-mirrored batch after restart: newest wins
            del ups[i + 1 :], downs[i + 1 :]
        elif i < len(ups):
            # an older upstream offset written again (task restarted behind): later syncs are stale
            del ups[i:], downs[i:]
            ups.append(sync.upstream_offset)
            downs.append(sync.downstream_offset)
        else:
            ups.append(sync.upstream_offset)
            downs.append(sync.downstream_offset)
        if len(ups) > self.max_per_partition:
            del ups[0], downs[0]

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._upstream)

    def syncs(self, tp: TopicPartition) -> list[tuple[int, int]]:
        return list(zip(self._upstream.get(tp, []), self._downstream.get(tp, []), strict=True))

    def translate(
        self, tp: TopicPartition, upstream: int, downstream_end: int | None = None
    ) -> int | None:
        """Target position for source position ``upstream``; None when no sync covers it."""
        ups = self._upstream.get(tp) or []
        i = bisect.bisect_right(ups, upstream) - 1
        if i < 0:
            first = self._downstream[tp][0] if ups else None
            return self._translate_older(tp, upstream, first, downstream_end)
        downs = self._downstream[tp]
        u0, d0 = ups[i], downs[i]
        result = d0 + (upstream - u0)
        if i + 1 < len(ups):
            result = min(result, downs[i + 1])
        if downstream_end is not None:
            result = min(result, max(d0, downstream_end))
        return result

    def _translate_older(self, tp: TopicPartition, upstream: int, first_downstream: int | None,
                         downstream_end: int | None) -> int | None:
        """``upstream`` before the oldest sync held, by the older syncs (capped at the first held)."""
        points = list(self.older(tp)) if self.older is not None else []
        j = bisect.bisect_right(points, (upstream, 1 << 63)) - 1
        if j < 0:
            return None
        u0, d0 = points[j]
        result = d0 + (upstream - u0)
        if first_downstream is not None:
            result = min(result, first_downstream)
        if j + 1 < len(points):
            result = min(result, points[j + 1][1])
        if downstream_end is not None:
            result = min(result, max(d0, downstream_end))
        return result
