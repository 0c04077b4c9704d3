"""One side (source or target) of a partition being audited: the batches fetched and not yet
compared, read either a batch at a time or a record at a time (pure, used by
:mod:`mm2py.engine.audit.walk`)."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence

from mm2py.engine.audit.records import Rec, Records, records_of
from mm2py.protocol.batch_edit import crop
from mm2py.protocol.records import RecordBatch

__all__ = ["Side"]


class Side:
    """Batches of one partition in offset order, from ``start`` up to ``end`` (exclusive, the
    partition's end when the audit began: nothing at or past it is compared)."""

    def __init__(self, start: int, end: int) -> None:
        self.end = end
        #: the next offset to fetch (moves past batches a read_committed fetch filtered out)
        self.fetch_next = start
        self._batches: deque[RecordBatch] = deque()
        #: the decoded records of batches read record by record, by their place in _batches
        self._decoded: deque[Records | None] = deque()
        #: the next record of the first batch when it is read record by record (None: its start)
        self._at: int | None = None
        self.buffered = 0  # bytes of _batches
        self.bytes_read = 0
        #: the offset past the last batch handed over: a batch starting beyond it means a gap
        self._last_next = start
        #: offsets this side skips: aborted transactions, control records, compaction (the source
        #: then legitimately holds offsets a mirror does not copy)
        self.gaps_seen = False

    # -------------------------------------------------------------------------------- feeding
    def add(self, batches: Sequence[RecordBatch], next_offset: int) -> None:
        """A fetch's batches from :attr:`fetch_next` on and where the next fetch starts. A batch
        starting before :attr:`fetch_next` is cropped to it (the raw fetcher does that already)."""
        for b in batches:
            if b.base_offset < self.fetch_next:
                cropped = crop(b, self.fetch_next)
                if cropped is None:
                    continue
                b = cropped
            if b.base_offset >= self.end:
                break
            if b.base_offset > self._last_next or not b.is_contiguous():
                self.gaps_seen = True
            self._last_next = b.next_offset
            self._batches.append(b)
            self._decoded.append(None)
            self.buffered += b.size
            self.bytes_read += b.size
        if self._last_next < min(next_offset, self.end):
            self.gaps_seen = True  # batches filtered out at the end of the fetch
        self.fetch_next = max(self.fetch_next, next_offset)

    @property
    def fetched_all(self) -> bool:
        """Nothing more to fetch below :attr:`end`."""
        return self.fetch_next >= self.end

    # -------------------------------------------------------------------------- batch at a time
    def whole_batch(self) -> RecordBatch | None:
        """The next batch when no record of it was compared yet and it lies below :attr:`end`."""
        if self._at is not None or not self._batches:
            return None
        b = self._batches[0]
        return b if b.last_offset < self.end else None

    def pop_batch(self) -> RecordBatch:
        b = self._batches.popleft()
        self._decoded.popleft()
        self._at = None
        self.buffered -= b.size
        return b

    # ------------------------------------------------------------------------- record at a time
    @property
    def at_batch_start(self) -> bool:
        return self._at is None

    def _records(self, i: int) -> Records:
        recs = self._decoded[i]
        if recs is None:
            recs = self._decoded[i] = records_of(self._batches[i])
        return recs

    def head(self) -> tuple[Records, int, int] | None:
        """The first batch's records, the index of the next one and the index past the last one
        below :attr:`end` (more than the next: at least one is there); None when no record below
        :attr:`end` is buffered."""
        while self._batches:
            recs = self._records(0)
            at = self._at or 0
            if at < len(recs.offsets):
                stop = bisect.bisect_left(recs.offsets, self.end, at)
                return (recs, at, stop) if stop > at else None
            self.pop_batch()  # a batch without a record left (e.g. every record compacted away)
        return None

    def skip(self, n: int) -> None:
        """Past the next ``n`` records of the first batch (at most those :meth:`head` gives)."""
        at = (self._at or 0) + n
        if at >= len(self._records(0).offsets):
            self.pop_batch()
        else:
            self._at = at

    def peek(self) -> Rec | None:
        """The next record below :attr:`end`; None when none is buffered."""
        head = self.head()
        return None if head is None else head[0].rec(head[1])

    def lookahead(self, n: int) -> list[Rec]:
        """Up to ``n`` records from the next one on (below :attr:`end`), without consuming them."""
        out: list[Rec] = []
        start = self._at or 0
        for i in range(len(self._batches)):
            recs = self._records(i)
            for j in range(start if i == 0 else 0, len(recs.offsets)):
                if recs.offsets[j] >= self.end or len(out) >= n:
                    return out
                out.append(recs.rec(j))
        return out

    @property
    def exhausted(self) -> bool:
        """Every record below :attr:`end` was compared."""
        return self.fetched_all and self.head() is None
