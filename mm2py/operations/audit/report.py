"""``mm2py audit``'s report: the JSON document (pydantic, the edge), its verdict and exit status,
and the summary table printed on stdout."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

from pydantic import BaseModel

from mm2py.engine.audit import (
    CompareMode,
    Mismatch,
    MismatchKind,
    OffsetRange,
    PartitionAudit,
    PartitionOutcome,
    PartitionStatus,
)
from mm2py.operations.audit.scope import Pair

__all__ = ["AuditReport", "Verdict", "partition_report", "table"]


class Verdict(enum.StrEnum):
    #: every partition agrees: exit status 0
    AGREE = "agree"
    #: some partition disagrees (a mismatch, or target records tied to no source offset): 1
    DISAGREE = "disagree"
    #: no disagreement found, but some partition could not be read to its end: 2
    INCOMPLETE = "incomplete"

    @property
    def exit_code(self) -> int:
        return {Verdict.AGREE: 0, Verdict.DISAGREE: 1, Verdict.INCOMPLETE: 2}[self]


class Offsets(BaseModel):
    """Offsets ``first`` to ``last``, both included."""

    first: int
    last: int

    @classmethod
    def of(cls, r: OffsetRange | None) -> Offsets | None:
        return None if r is None else cls(first=r.first, last=r.end - 1)

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}..{self.last}"


class MismatchReport(BaseModel):
    kind: MismatchKind
    source: Offsets | None
    target: Offsets | None
    detail: str

    @classmethod
    def of(cls, m: Mismatch) -> MismatchReport:
        return cls(kind=m.kind, source=Offsets.of(m.source), target=Offsets.of(m.target), detail=m.detail)

    def summary(self) -> str:
        sides = (("source", self.source), ("target", self.target))
        where = [f"{side} {r}" for side, r in sides if r is not None]
        return f"{self.kind}: {', '.join(where)}"


class AnchorReport(BaseModel):
    """Where a partition's comparison started: this source offset's record at this target offset."""

    source: int
    target: int
    #: an offset sync or a stored position
    kind: str


class PartitionReport(BaseModel):
    topic: str
    partition: int
    target_topic: str
    status: PartitionStatus
    #: how the verified range was compared (None: nothing was)
    compared: CompareMode | None
    source_verified: Offsets | None
    target_verified: Offsets | None
    batches_identical: int
    records_compared: int
    source_bytes: int
    target_bytes: int
    first_mismatch: MismatchReport | None
    anchor: AnchorReport | None
    notes: list[str]


def partition_report(pair: Pair, out: PartitionOutcome) -> PartitionReport:
    return PartitionReport(
        topic=pair.source.topic, partition=pair.source.partition, target_topic=pair.target.topic,
        status=out.status, compared=None if out.source is None else out.mode,
        source_verified=Offsets.of(out.source), target_verified=Offsets.of(out.target),
        batches_identical=out.batches_identical, records_compared=out.records_compared,
        source_bytes=out.source_bytes, target_bytes=out.target_bytes,
        first_mismatch=None if out.mismatch is None else MismatchReport.of(out.mismatch),
        anchor=None if out.anchor is None else AnchorReport(source=out.anchor[0], target=out.anchor[1],
                                                            kind=out.anchor[2]),
        notes=out.notes)


class AnchorsRead(BaseModel):
    offset_syncs: int
    stored_positions: int
    malformed_records: int


class AuditReport(BaseModel):
    flow: str
    source: str
    target: str
    verdict: Verdict
    #: when the audit started (UTC, ISO 8601) and how long it took: in all, and comparing (after
    #: the clusters were connected and the anchors read)
    started_at: str
    seconds: float
    compare_seconds: float
    #: stored (compressed) batch bytes read from each side, and the source's per compare second
    source_bytes: int
    target_bytes: int
    source_mb_per_s: float
    anchors: AnchorsRead
    notes: list[str]
    partitions: list[PartitionReport]

    @staticmethod
    def verdict_of(statuses: Sequence[PartitionStatus]) -> Verdict:
        if any(s in (PartitionStatus.MISMATCH, PartitionStatus.UNALIGNED) for s in statuses):
            return Verdict.DISAGREE
        if any(s is PartitionStatus.ERROR for s in statuses):
            return Verdict.INCOMPLETE
        return Verdict.AGREE

    @staticmethod
    def partitions_of(audits: Mapping[Pair, PartitionAudit]) -> list[PartitionReport]:
        return [partition_report(pair, audits[pair].outcome())
                for pair in sorted(audits, key=lambda p: (p.source.topic, p.source.partition))]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _cell(r: Offsets | None) -> str:
    return "-" if r is None else str(r)


def table(report: AuditReport) -> str:
    """The summary table: a line per partition, then the totals."""
    header = ["TOPIC", "PARTITION", "STATUS", "SOURCE VERIFIED", "TARGET VERIFIED", "COMPARED",
              "FIRST MISMATCH"]
    rows = [[p.topic, str(p.partition), str(p.status), _cell(p.source_verified), _cell(p.target_verified),
             str(p.compared or "-"), p.first_mismatch.summary() if p.first_mismatch else "-"]
            for p in report.partitions]
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=False)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
             for line in [header, *rows]]
    counts: dict[str, int] = {}
    for p in report.partitions:
        counts[p.status] = counts.get(p.status, 0) + 1
    tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    lines.append(f"{report.flow}: {report.verdict.upper()}: {_plural(len(report.partitions), 'partition')} "
                 f"({tally or 'none'}); {report.source_bytes / 1e6:.1f} MB of source batches compared in "
                 f"{report.compare_seconds:.1f} s ({report.source_mb_per_s:.0f} MB/s), "
                 f"{report.seconds:.1f} s in all")
    lines += [f"  {p.topic}-{p.partition}: {p.first_mismatch.detail}" for p in report.partitions
              if p.first_mismatch is not None]
    return "\n".join(lines)
