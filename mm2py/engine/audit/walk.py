"""The aligned comparison of one source partition with its remote partition (pure, sans-IO).

A :class:`PartitionWalk` starts at an anchor: a source offset and the target offset its first
record was mirrored to (see :mod:`mm2py.engine.audit.anchors`). From there the target must hold
the source's records in order, nothing more and nothing less, up to the target's end: mm2py
produces each fetched batch in order, as the same bytes, and a read_committed fetch (the mirror's)
leaves out aborted transactions and control batches, which the walk's source side leaves out too.

The caller fetches both sides (``wants_*``, ``add_*``) and calls :meth:`PartitionWalk.step`, which
compares what it can:

* **batch by batch** while both sides stand at the start of a batch and the two batches have the
  same :func:`~mm2py.engine.audit.records.batch_print` (records section by CRC-32C, no
  decompression): the usual case, and the fast one;
* **record by record** otherwise (a batch cropped at a resume, small batches merged into one,
  compaction gaps closed, a target written by another mirror with batches of its own), until both
  sides stand at the start of a batch again.

The first record that differs ends the walk with a :class:`~mm2py.engine.audit.outcome.Mismatch`,
classified by looking ahead (up to :data:`LOOK_SOURCE` source and :data:`LOOK_TARGET` target
records): the target record found further on the source (source records MISSING), the source
record found further on the target (target records EXTRA), or neither (DIFFERENT). Target records
left when the source has nothing more below its end are EXTRA; source records left when the
target is done are not mirrored yet, which is no mismatch.
"""

from __future__ import annotations

from collections.abc import Sequence

from mm2py.engine.audit.outcome import CompareMode, Mismatch, MismatchKind, OffsetRange
from mm2py.engine.audit.records import Rec, Records, batch_print, difference
from mm2py.engine.audit.sides import Side
from mm2py.protocol.records import RecordBatch

__all__ = ["LOOK_SOURCE", "LOOK_TARGET", "PartitionWalk"]

#: how far a mismatch looks ahead for the target record among the source's (records missing)
LOOK_SOURCE = 10_000
#: and for the source record among the target's (records the source does not hold)
LOOK_TARGET = 1_000
#: bytes a side may hold before it is not fetched for (a side stuck in a mismatch gets more)
BUFFER_BYTES = 16 * 1024 * 1024


class PartitionWalk:
    """Compares source offsets from ``source_start`` with target offsets from ``target_start``,
    each side up to its end (exclusive), record for record in order."""

    def __init__(self, source_start: int, source_end: int, target_start: int, target_end: int,
                 *, buffer_bytes: int = BUFFER_BYTES) -> None:
        self.source = Side(source_start, source_end)
        self.target = Side(target_start, target_end)
        self.buffer_bytes = buffer_bytes
        self.mode = CompareMode.BATCHES
        self.batches_identical = 0
        self.records_compared = 0
        #: source and target offsets verified so far: first (None until one is) and next
        self.source_first: int | None = None
        self.source_next = source_start
        self.target_first: int | None = None
        self.target_next = target_start
        self.mismatch: Mismatch | None = None
        #: the walk is over: the target's end reached, or a mismatch found
        self.done = False
        #: a mismatch seen and being classified: more records wanted from these sides
        self._classifying = False

    # ------------------------------------------------------------------------------ the caller's
    def wants_source(self) -> bool:
        return self._wants(self.source, LOOK_SOURCE)

    def wants_target(self) -> bool:
        return self._wants(self.target, LOOK_TARGET)

    def _wants(self, side: Side, look: int) -> bool:
        if self.done or side.fetched_all:
            return False
        if self._classifying:
            return len(side.lookahead(look)) < look
        return side.buffered < self.buffer_bytes

    def add_source(self, batches: Sequence[RecordBatch], next_offset: int) -> None:
        self.source.add(batches, next_offset)

    def add_target(self, batches: Sequence[RecordBatch], next_offset: int) -> None:
        self.target.add(batches, next_offset)

    # --------------------------------------------------------------------------------- comparing
    def step(self) -> None:
        """Compare everything the buffered batches allow."""
        src, tgt = self.source, self.target
        while not self.done:
            if self._classifying:
                self._classify()
                return
            if src.at_batch_start and tgt.at_batch_start and self._batches():
                continue
            t = tgt.head()
            if t is None:
                if tgt.fetched_all:
                    self.done = True  # the target's end: everything on it was compared
                return
            s = src.head()
            if s is None:
                if src.fetched_all:
                    first = t[0].offsets[t[1]]
                    self._found(MismatchKind.EXTRA, None, OffsetRange(first, tgt.end),
                                "target records past the last source record")
                return
            if not self._records(s, t):
                self._classifying = True

    def _records(self, s: tuple[Records, int, int], t: tuple[Records, int, int]) -> bool:
        """The next records of both first batches compared as far as both go (one list
        comparison while they agree); False at the first that differs."""
        (srecs, si, s_stop), (trecs, ti, t_stop) = s, t
        n = min(s_stop - si, t_stop - ti)
        a, b = srecs.contents[si:si + n], trecs.contents[ti:ti + n]
        same = n if a == b else next(k for k in range(n) if a[k] != b[k])
        if same:
            self._matched(srecs.offsets[si], trecs.offsets[ti], srecs.offsets[si + same - 1],
                          trecs.offsets[ti + same - 1])
            self.source.skip(same)
            self.target.skip(same)
            self.records_compared += same
            self.mode = CompareMode.RECORDS
        return same == n

    def _batches(self) -> bool:
        """Both next batches compared whole; False when they cannot be (not buffered, or not equal)."""
        s, t = self.source.whole_batch(), self.target.whole_batch()
        if s is None or t is None or batch_print(s) != batch_print(t):
            return False
        self.source.pop_batch()
        self.target.pop_batch()
        self._matched(s.base_offset, t.base_offset, s.last_offset, t.last_offset)
        self.batches_identical += 1
        return True

    def _matched(self, s_first: int, t_first: int, s_last: int, t_last: int) -> None:
        if self.source_first is None:
            self.source_first, self.target_first = s_first, t_first
        self.source_next, self.target_next = s_last + 1, t_last + 1

    def _classify(self) -> None:
        """Decide what the first difference is, once enough records on both sides are buffered."""
        src, tgt = self.source, self.target
        ahead_s, ahead_t = src.lookahead(LOOK_SOURCE), tgt.lookahead(LOOK_TARGET)
        if (len(ahead_s) < LOOK_SOURCE and not src.fetched_all) or (
                len(ahead_t) < LOOK_TARGET and not tgt.fetched_all):
            return  # more to fetch first
        s, t = ahead_s[0], ahead_t[0]
        k = _find(ahead_s, t)
        j = _find(ahead_t, s)
        if k is not None and (j is None or k <= j):
            self._found(MismatchKind.MISSING, OffsetRange(s.offset, ahead_s[k].offset),
                        OffsetRange(t.offset, t.offset + 1),
                        f"source records not on the target; target offset {t.offset} holds source "
                        f"offset {ahead_s[k].offset}")
        elif j is not None:
            self._found(MismatchKind.EXTRA, OffsetRange(s.offset, s.offset + 1),
                        OffsetRange(t.offset, ahead_t[j].offset),
                        f"target records the source does not hold; source offset {s.offset} is at "
                        f"target offset {ahead_t[j].offset}")
        else:
            self._found(MismatchKind.DIFFERENT, OffsetRange(s.offset, s.offset + 1),
                        OffsetRange(t.offset, t.offset + 1), difference(s, t))

    def _found(self, kind: MismatchKind, source: OffsetRange | None, target: OffsetRange | None,
               detail: str) -> None:
        self.mismatch = Mismatch(kind, source, target, detail)
        self._classifying = False
        self.done = True

    # ---------------------------------------------------------------------------------- results
    @property
    def verified(self) -> tuple[OffsetRange | None, OffsetRange | None]:
        """The source and target ranges found to agree."""
        if self.source_first is None or self.target_first is None:
            return None, None
        return (OffsetRange(self.source_first, self.source_next),
                OffsetRange(self.target_first, self.target_next))


def _find(records: list[Rec], wanted: Rec) -> int | None:
    """The index (1 or more) of the first of ``records`` after the first with ``wanted``'s content."""
    for i in range(1, len(records)):
        r = records[i]
        if r.timestamp == wanted.timestamp and r.body == wanted.body:
            return i
    return None
