"""Where the audit of a partition starts, and what the offset syncs say about the source's past
(pure).

**Anchors.** An anchor is a source offset and the target offset the mirror wrote its first record
to: every offset sync (MM2's format, written by mm2py or by MirrorMaker 2: record ``U`` is at
target offset ``D``) and every stored position that carries a target offset (mm2py's
``mm2py.target.offset``: the mirror's next record from source offset ``P`` on goes to target offset
``T``). The walk starts at the earliest anchor, by target offset, whose source offset is still on
the source (at or past its log start) and whose target offset is still on the target: from there
on, source batch *k* is target batch *k*. Between two syncs with the same distance between source
and target offsets the mapping is linear, so where a log's start cuts into such a run the walk
starts right there. Target records before the start are not compared (nothing ties them to a
source offset any more); with no anchor at all a target that holds records is UNALIGNED.

**What the syncs say below the source's log start.** mm2py writes a sync wherever the distance
between source and target offsets changes, so between two syncs ``(U1, D1)`` and ``(U2, D2)`` the
target holds ``D2 - D1`` records from ``U1`` on, one per source offset, and source offsets
``U1 + (D2 - D1)`` up to ``U2`` were not mirrored. Past the anchor the walk itself sees
what the target lacks. Below the source's log start, where retention or DeleteRecords removed
them, such offsets are either records deleted before the mirror read them, or offsets no consumer
sees (aborted transactions, transaction markers, compaction): the audit reports them as
SOURCE_DELETED unless the readable part of the source shows such gaps itself, in which case they
are only a note (:meth:`AnchorBook.deleted`). MirrorMaker 2 keeps only the newest of the syncs it has
not sent yet for a partition, so between two of its syncs the size of such a range is known but
not where it lies.
"""

from __future__ import annotations

import bisect
import enum
import itertools
from dataclasses import dataclass

from mm2py.engine.audit.outcome import OffsetRange

__all__ = ["Anchor", "AnchorBook", "AnchorKind"]


class AnchorKind(enum.StrEnum):
    #: an offset sync: source record ``source`` is at target offset ``target``
    SYNC = "offset sync"
    #: a stored position: the next record mirrored from source offset ``source`` on is at ``target``
    POSITION = "stored position"


@dataclass(frozen=True, order=True)
class Anchor:
    target: int
    source: int
    kind: AnchorKind = AnchorKind.SYNC


class AnchorBook:
    """One partition's anchors, added as they are read, for a source log starting at
    ``source_start`` and a target log starting at ``target_start``.

    Offset syncs are kept as a chain sorted by target offset in which a sync lying on the line of
    the two before it (the same ``source - target``) replaces the last one: between the ends of
    such a run the mapping is linear, so neither the start of the walk (taken inside a run where
    the logs' starts cut into it) nor the ranges never mirrored need the points inside, and a flow
    with few gaps keeps few syncs however long the topic. Stored positions are kept as the
    earliest usable one only."""

    def __init__(self, source_start: int, target_start: int) -> None:
        self.source_start = source_start
        self.target_start = target_start
        #: (target, source) of the syncs kept, sorted
        self._chain: list[tuple[int, int]] = []
        self._position: Anchor | None = None

    def add_sync(self, source: int, target: int) -> None:
        chain = self._chain
        point = (target, source)
        if chain and point <= chain[-1]:  # out of the order syncs are written in: kept as it is
            i = bisect.bisect_left(chain, point)
            if i == len(chain) or chain[i] != point:
                chain.insert(i, point)
            return
        if len(chain) >= 2 and chain[-1][1] - chain[-1][0] == source - target == chain[-2][1] - chain[-2][0]:
            chain[-1] = point  # the run goes on: its former end lies inside it
        else:
            chain.append(point)

    def add_position(self, source: int, target: int) -> None:
        anchor = Anchor(target, source, AnchorKind.POSITION)
        if self._usable(source, target) and (self._position is None or anchor < self._position):
            self._position = anchor

    def _usable(self, source: int, target: int) -> bool:
        return source >= self.source_start and target >= self.target_start

    @property
    def syncs(self) -> list[tuple[int, int]]:
        """(target, source) of the syncs kept."""
        return list(self._chain)

    def start(self) -> Anchor | None:
        """The earliest anchor still on both sides (by target offset), or None."""
        best = self._position
        sync = self._first_sync()
        if sync is not None and (best is None or sync < best):
            best = sync
        return best

    def _first_sync(self) -> Anchor | None:
        chain = self._chain
        for i, (target, source) in enumerate(chain):
            if self._usable(source, target):
                return Anchor(target, source)
            nxt = chain[i + 1] if i + 1 < len(chain) else None
            delta = source - target
            if nxt is not None and nxt[1] - nxt[0] == delta:  # a run: linear up to the next sync
                at = max(source, self.source_start, self.target_start + delta)
                if at <= nxt[1]:
                    return Anchor(at - delta, at)
        return None

    def deleted(self) -> list[tuple[OffsetRange, int]]:
        """The source ranges below the source's log start that consecutive offset syncs say were
        never mirrored, lowest first, each with the target offset the mirror went on at."""
        out: list[tuple[OffsetRange, int]] = []
        for (at, a), (bt, b) in itertools.pairwise(self._chain):
            if b <= a:  # the same or an earlier source offset again: mirrored twice
                continue
            hole = a + (bt - at)
            end = min(b, self.source_start)
            if hole < end:
                out.append((OffsetRange(hole, end), bt))
        return out
