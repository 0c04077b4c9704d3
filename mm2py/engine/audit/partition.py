"""The audit of one source partition and its remote partition, start to conclusion (pure).

:class:`PartitionAudit` takes both partitions' log starts and ends (the target's read first, so
every record on the target came from a source offset below the source end read after it) and
the partition's anchors (an :class:`~mm2py.engine.audit.anchors.AnchorBook` made with those
starts); it plans the walk (:mod:`.anchors`), holds it
(:class:`~mm2py.engine.audit.walk.PartitionWalk`, which the I/O driver feeds) and concludes with a
:class:`~mm2py.engine.audit.outcome.PartitionOutcome`.
"""

from __future__ import annotations

from dataclasses import dataclass

from mm2py.engine.audit.anchors import AnchorBook
from mm2py.engine.audit.outcome import (
    Mismatch,
    MismatchKind,
    OffsetRange,
    PartitionOutcome,
    PartitionStatus,
)
from mm2py.engine.audit.walk import PartitionWalk

__all__ = ["Ends", "PartitionAudit"]


@dataclass(frozen=True)
class Ends:
    """Log start and end offsets of both partitions when the audit began (ends exclusive, as the
    mirror reads: the last stable offset under read_committed)."""

    source_start: int
    source_end: int
    target_start: int
    target_end: int


class PartitionAudit:
    def __init__(self, ends: Ends, anchors: AnchorBook) -> None:
        self.ends = ends
        self.anchor = anchors.start()
        #: source ranges the syncs say were never mirrored, below the source's log start, each with
        #: the target offset the mirror went on at
        self.deleted = anchors.deleted()
        self.walk: PartitionWalk | None = None
        if self.anchor is not None:
            self.walk = PartitionWalk(self.anchor.source, ends.source_end, self.anchor.target,
                                      ends.target_end)
        #: why the partition could not be read to the end (None: it could)
        self.error: str | None = None

    @property
    def done(self) -> bool:
        return self.walk is None or self.walk.done or self.error is not None

    def fail(self, reason: str) -> None:
        self.error = reason

    def outcome(self) -> PartitionOutcome:
        e = self.ends
        walk = self.walk
        if walk is None:
            return self._unanchored()
        source, target = walk.verified
        out = PartitionOutcome(
            PartitionStatus.AGREE, source, target, walk.mode, walk.batches_identical, walk.records_compared,
            walk.source.bytes_read, walk.target.bytes_read)
        assert self.anchor is not None
        a = self.anchor
        out.anchor = (a.source, a.target, str(a.kind))
        if a.target > e.target_start:
            out.notes.append(f"target offsets {OffsetRange(e.target_start, a.target)} come before the "
                             "first anchor still on both sides: not compared")
        if a.source > e.source_start:
            out.notes.append(f"source offsets {OffsetRange(e.source_start, a.source)} come before the "
                             "first anchor: not compared")
        out.mismatch = self._deleted(out, walk.source.gaps_seen) or walk.mismatch
        if self.error is not None:
            out.status = PartitionStatus.ERROR
            out.notes.append(self.error)
        if out.mismatch is not None:
            out.status = PartitionStatus.MISMATCH
        elif walk.done and walk.source_next < e.source_end:
            out.notes.append(f"source offsets {OffsetRange(walk.source_next, e.source_end)} come after the "
                             "target's end: not mirrored yet (or no record a consumer sees)")
        return out

    def _deleted(self, out: PartitionOutcome, gaps_seen: bool) -> Mismatch | None:
        """The first source range deleted before it was mirrored, as a mismatch (or notes, when
        the source skips offsets itself)."""
        if not self.deleted:
            return None
        ranges = [r for r, _ in self.deleted]
        shown = ", ".join(str(r) for r in ranges[:5]) + (" ..." if len(ranges) > 5 else "")
        start = self.ends.source_start
        if gaps_seen:
            out.notes.append(f"source offsets {shown} were not mirrored and are no longer on the source "
                             f"(its log starts at {start}); the source skips offsets itself (aborted "
                             "transactions, transaction markers or compaction), so they may have held "
                             "no record a consumer sees")
            return None
        if len(ranges) > 1:
            out.notes.append(f"source ranges deleted before they were mirrored: {shown}")
        first, went_on = self.deleted[0]
        return Mismatch(MismatchKind.SOURCE_DELETED, first, OffsetRange(went_on, went_on + 1),
                        f"source offsets {first} ({first.count} offsets) were never mirrored and are "
                        f"no longer on the source (its log starts at {start}): deleted before the "
                        f"mirror read them; the target goes on at offset {went_on}")

    def _unanchored(self) -> PartitionOutcome:
        e = self.ends
        if e.target_end > e.target_start:
            return PartitionOutcome(PartitionStatus.UNALIGNED, notes=[
                f"target offsets {OffsetRange(e.target_start, e.target_end)} are tied to no source "
                "offset: no offset sync or stored position with a target offset is still on both "
                "sides"])
        note = ("nothing to compare: both partitions are empty" if e.source_end <= e.source_start else
                f"the target holds nothing yet: source offsets {OffsetRange(e.source_start, e.source_end)}"
                " are not on the target yet")
        return PartitionOutcome(PartitionStatus.AGREE, notes=[note])
