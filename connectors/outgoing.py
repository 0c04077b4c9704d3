"""What the sink writes for one partition's fetched batches: coalesced, rebuilt, and re-sent exactly.

Pure (no I/O), used by :class:`connectors.mirror_sink.MirrorSink`:

* :func:`prepare` turns one source partition's fetched batches into the batches to produce, each
  with the source range it covers: runs of small batches merged (:func:`mm2py.protocol.coalesce.
  coalesce`, when enabled), batches with compaction gaps rebuilt contiguous (keeping each record's
  source offset for the offset syncs), every other batch passed through as the same bytes.
* :class:`ResendPlan` keeps, per partition, the source ranges of the batches a failed produce left
  unacknowledged. Their outcome is unknown: the broker may have appended them and lost only the
  answer. The producer re-sends them under the same sequence numbers, which the broker recognises
  only if each re-sent batch holds the same records, so the next :func:`prepare` of the partition
  must form the same batches: the ranges are passed to ``coalesce`` as ``cuts``. When the new fetch
  ends before the last such range, the batches past the last complete range are held back and the
  sink asks the task to fetch again (the ranges are of records already fetched once, so a fetch from
  the same position reaches them again).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from mm2py.protocol.batch_edit import rebuild_contiguous
from mm2py.protocol.coalesce import DEFAULT_TARGET, DEFAULT_THRESHOLD, coalesce
from mm2py.protocol.compression import LZ4_DEFAULT_LEVEL
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

__all__ = ["CoalesceSettings", "Outgoing", "ResendPlan", "prepare"]

log = logging.getLogger(__name__)

_MIB = 1024 * 1024


@dataclass(frozen=True)
class CoalesceSettings:
    """``mm2py.coalesce.*``: merge batches below ``threshold`` bytes up to ``target`` bytes."""

    enabled: bool = True
    threshold: int = DEFAULT_THRESHOLD
    target: int = DEFAULT_TARGET
    #: no merged batch is larger (the target broker's ``message.max.bytes`` default is 1 MiB)
    max_bytes: int = _MIB
    #: compression level of merged LZ4 batches (``mm2py.coalesce.lz4.level``)
    lz4_level: int = LZ4_DEFAULT_LEVEL


@dataclass(frozen=True)
class Outgoing:
    """One batch to produce and the source records it holds."""

    batch: RecordBatch
    #: source offsets of its first and last record
    first: int
    last: int
    #: the source position after it (past the last source batch it covers)
    source_next: int
    #: base offset of the first source batch it covers (``first`` unless rebuilt)
    source_base: int
    #: the source offset of each record, when the batch was rebuilt (compaction gaps)
    record_offsets: list[int] | None = None
    #: number of source batches it holds (more than one: merged)
    sources: int = 1


def prepare(
    batches: Sequence[RecordBatch], settings: CoalesceSettings | None, cuts: Sequence[int] = ()
) -> list[Outgoing]:
    """The batches to produce for one partition's ``batches`` (CRC-verified by the fetcher)."""
    if settings is not None and settings.enabled:
        groups = [
            (c.batch, c.first_offset, c.last_offset, c.sources)
            for c in coalesce(batches, max_bytes=settings.max_bytes, threshold=settings.threshold,
                              target=settings.target, verified=True, cuts=frozenset(cuts),
                              lz4_level=settings.lz4_level)
        ]
    else:
        groups = [(b, b.base_offset, b.last_offset, 1) for b in batches]
    out: list[Outgoing] = []
    for batch, first, last, sources in groups:
        if sources == 1 and not batch.is_contiguous():
            rebuilt, offsets = rebuild_contiguous(batch)
            if offsets:  # else every record was compacted away: nothing to write
                out.append(Outgoing(rebuilt, offsets[0], offsets[-1], batch.next_offset,
                                    batch.base_offset, offsets))
            continue
        out.append(Outgoing(batch, first, last, last + 1, first, None, sources))
    return out


@dataclass
class ResendPlan:
    """Source ranges ``(first, last)`` of unacknowledged batches, per partition (see module doc)."""

    ranges: dict[TopicPartition, list[tuple[int, int]]]
    #: consecutive fetches that ended before a partition's last range
    short: dict[TopicPartition, int]
    #: after this many short fetches in a row a partition's ranges are given up (logged)
    max_short: int = 5

    @classmethod
    def empty(cls) -> ResendPlan:
        return cls({}, {})

    def cuts(
        self, tp: TopicPartition, batches: Sequence[RecordBatch]
    ) -> tuple[Sequence[RecordBatch], list[int], bool]:
        """``(batches to prepare, cuts, short)`` for a partition's newly fetched ``batches``.

        ``short``: the fetch ended before the last unacknowledged range, so only the batches up to
        the last range it covers are returned and the partition must be fetched again. Ranges that
        no longer start where the batches start (the position moved, e.g. a source reset) are
        dropped."""
        ranges = self.ranges.get(tp)
        if not ranges or not batches or batches[0].base_offset != ranges[0][0]:
            self.forget(tp)
            return batches, [], False
        ends = [last for _, last in ranges]
        reach = batches[-1].last_offset
        if reach >= ends[-1]:
            self.short.pop(tp, None)
            return batches, ends, False
        self.short[tp] = self.short.get(tp, 0) + 1
        if self.short[tp] > self.max_short:
            log.warning("%s: offsets up to %d are not fetched again; unacknowledged batches are "
                        "re-sent as the new fetch allows (the broker may append them twice)",
                        tp, ends[-1])
            self.forget(tp)
            return batches, [], False
        covered = [e for e in ends if e <= reach]
        limit = covered[-1] if covered else -1
        return [b for b in batches if b.last_offset <= limit], covered, True

    def settle(
        self, tp: TopicPartition, produced: Sequence[Outgoing], acked: int, held_back: bool,
        *, replace: bool = True,
    ) -> None:
        """After a produce of ``produced`` of which the first ``acked`` were acknowledged; with
        ``held_back`` the ranges past what was produced stay too (not sent this time).
        ``replace=False`` (the batches were prepared without this partition's ranges, e.g. while
        an earlier produce was still unanswered): the unacknowledged ranges are added after those
        already kept, in produce order."""
        old = self.ranges.get(tp, [])
        new = [(o.source_base, o.source_next - 1) for o in produced[acked:]]
        if held_back:
            end = produced[-1].source_next - 1 if produced else -1
            new += [r for r in old if r[0] > end]
        if not replace:
            new = old + new
        if new:
            self.ranges[tp] = new
        else:
            self.ranges.pop(tp, None)

    def forget(self, tp: TopicPartition) -> None:
        self.ranges.pop(tp, None)
        self.short.pop(tp, None)
