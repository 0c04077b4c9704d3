"""What the audit concludes about one partition (pure data): its status, the range it verified, how
it compared it, and the first mismatch."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["CompareMode", "Mismatch", "MismatchKind", "OffsetRange", "PartitionOutcome", "PartitionStatus"]


class PartitionStatus(enum.StrEnum):
    #: every target record from the anchor to the target's end is the next source record
    AGREE = "agree"
    #: the first mismatch is in :attr:`PartitionOutcome.mismatch`
    MISMATCH = "mismatch"
    #: the target holds records but no offset sync or stored position ties them to the source
    UNALIGNED = "unaligned"
    #: the partition could not be read to the end (e.g. retention removed what was being read)
    ERROR = "error"


class MismatchKind(enum.StrEnum):
    #: source records that are not on the target, between records that are
    MISSING = "missing"
    #: target records the source does not hold (produced straight into the remote topic, or twice)
    EXTRA = "extra"
    #: the record at this place differs (key, value, headers or timestamp)
    DIFFERENT = "different"
    #: source offsets that were never mirrored and are no longer on the source: deleted (retention,
    #: DeleteRecords) before the mirror read them
    SOURCE_DELETED = "source_deleted"


class CompareMode(enum.StrEnum):
    #: every target batch compared was a source batch as it came (records sections by CRC-32C)
    BATCHES = "batches"
    #: some target batches were compared record by record (a batch cropped at a resume, small
    #: batches coalesced, compaction gaps closed, or another mirror's own batching): slower
    RECORDS = "records"


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``first`` up to ``end`` (exclusive)."""

    first: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.first

    def __str__(self) -> str:
        return f"{self.first}" if self.count == 1 else f"{self.first}..{self.end - 1}"


@dataclass(frozen=True)
class Mismatch:
    kind: MismatchKind
    #: the source offsets concerned (MISSING, SOURCE_DELETED: the records lost; DIFFERENT, EXTRA:
    #: the source record compared at that place), None when the source had nothing left
    source: OffsetRange | None
    #: the target offsets concerned (EXTRA: the records the source does not hold; DIFFERENT: the
    #: record that differs; MISSING, SOURCE_DELETED: the record found where the lost ones belonged)
    target: OffsetRange | None
    detail: str


@dataclass
class PartitionOutcome:
    """One source partition and its remote partition, compared."""

    status: PartitionStatus
    #: source and target offsets verified to agree (None: nothing compared)
    source: OffsetRange | None = None
    target: OffsetRange | None = None
    mode: CompareMode = CompareMode.BATCHES
    #: target batches found byte-identical to their source batch
    batches_identical: int = 0
    #: target records compared one by one
    records_compared: int = 0
    #: bytes of stored (compressed) batches read from each side
    source_bytes: int = 0
    target_bytes: int = 0
    mismatch: Mismatch | None = None
    #: (source offset, target offset, what it came from) the walk started at; None: no anchor
    anchor: tuple[int, int, str] | None = None
    #: what was not compared, and why (target records before the anchor, source records not
    #: mirrored yet, gaps that cannot be told apart from aborted transactions, ...)
    notes: list[str] = field(default_factory=list)
