"""Merging consecutive record batches of one partition into one, and recognising such merges.

The building blocks of :mod:`mm2py.protocol.coalesce` (which decides *what* to merge) and of the
tail reconciler (which recognises, after a restart, a target batch that holds several source
batches). Pure: no I/O.

A batch is *merge-eligible* (:func:`merge_eligible`) when it is magic 2, its attributes carry
nothing but the codec id (no control, transactional, LogAppendTime or delete-horizon bit), and it
is contiguous (``recordsCount == lastOffsetDelta + 1``, at least one record). A *run* of eligible
batches can be merged when each one starts right after the previous one's last offset and all
have the same attributes (:func:`follows`).

The merge (:func:`merge_records`) keeps every record as it is -- attributes, timestamp, key, value
and headers bytes, and its offset (baseOffset = the run's first offset, offset deltas 0..n-1) --
and only re-frames the records' deltas. baseTimestamp is the smallest and maxTimestamp the
largest record timestamp. Producer fields are not carried over (-1): the mirror's producer stamps
its own producer id, epoch and sequence on every batch it writes (``batch_edit.for_produce``), so
the source batches' producers never reach the target; that is why a run may mix batches of
different source producers (as a partition written by many producers with ``linger.ms=0`` does).

The uncompressed merge is a pure function of the run (deterministic), so :func:`match_run` can
recognise a merged batch on the target from the source batches alone. It never relies on codec
output being stable across library versions: sections are compared decompressed when their
compressed bytes differ (:func:`same_content`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mm2py.protocol.compression import Codec, SectionBuffer, compress
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.record_codec import assemble_batch, records_section
from mm2py.protocol.records import ATTR_CODEC_MASK, ATTR_TRANSACTIONAL, RecordBatch

if TYPE_CHECKING:
    from mm2py.protocol.record_frames import Framing

# numpy and record_frames (the array-based merge) are imported on first use: with the compiled
# path (mm2py.protocol.native) a mirror of LZ4 or uncompressed batches never needs them, and numpy
# alone takes about 0.1 s of every mirror process's start

__all__ = [
    "MergedRecords",
    "RunScan",
    "eligible_fields",
    "follows",
    "follows_fields",
    "match_run",
    "merge_eligible",
    "merge_records",
    "merged_batch",
    "same_content",
    "scan_runs",
]

_ZSTD = int(Codec.ZSTD)

# Header bytes compared by same_content: lastOffsetDelta, baseTimestamp, maxTimestamp (23..43)
# and recordsCount (57..61). Producer fields (43..57) are the mirror's own.
_FIELDS_A = slice(23, 43)
_FIELDS_B = slice(57, 61)


@dataclass(frozen=True, slots=True)
class MergedRecords:
    """The deterministic, uncompressed form of the merge of a run (see :func:`merge_records`)."""

    attributes: int
    base_offset: int
    records_count: int
    base_timestamp: int
    max_timestamp: int
    #: uncompressed records section, offset deltas 0..records_count-1
    section: bytes

    @property
    def codec(self) -> Codec:
        return Codec(self.attributes & ATTR_CODEC_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.records_count - 1


# ------------------------------------------------------------------------------- eligibility
def merge_eligible(batch: RecordBatch) -> bool:
    """May ``batch`` take part in a merge? A header-only check (see the module docstring)."""
    _, _, _, magic, _, attrs, last_delta, _, _, _, _, _, count = batch.fields
    return eligible_fields(magic, attrs, last_delta, count)


def eligible_fields(magic: int, attributes: int, last_offset_delta: int, records_count: int) -> bool:
    """:func:`merge_eligible` from the header fields it reads."""
    return (
        magic == 2
        and attributes & ~ATTR_CODEC_MASK == 0
        and attributes <= _ZSTD
        and records_count >= 1
        and records_count == last_offset_delta + 1
    )


def follows(prev: RecordBatch, nxt: RecordBatch) -> bool:
    """May ``nxt`` join a run ending with ``prev``? No offset gap, the same attributes.

    Both batches are assumed :func:`merge_eligible`.
    """
    return follows_fields(prev.last_offset, prev.attributes, nxt.base_offset, nxt.attributes)


def follows_fields(prev_last_offset: int, prev_attributes: int, base_offset: int, attributes: int) -> bool:
    """:func:`follows` from the header fields it reads."""
    return base_offset == prev_last_offset + 1 and attributes == prev_attributes


# ------------------------------------------------------------------------------- decoding
_INT32_MAX = 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class RunScan:
    """Eligible batches CRC-checked, decompressed into one buffer and their records' framing
    parsed (:func:`scan_runs`), ready to be merged in groups of consecutive batches."""

    __slots__ = ("_base_offset", "_base_ts", "_counts", "_highs", "_lows", "batches", "framing")

    def __init__(self, batches: Sequence[RecordBatch], framing: Framing) -> None:
        self.batches = batches
        self.framing = framing
        self._base_ts = [b.base_timestamp for b in batches]
        self._base_offset = [b.base_offset for b in batches]
        self._counts = framing.counts.tolist()
        self._lows = [t + d for t, d in zip(self._base_ts, framing.ts_min.tolist(), strict=True)]
        self._highs = [t + d for t, d in zip(self._base_ts, framing.ts_max.tolist(), strict=True)]

    def in_sequence(self, i: int) -> bool:
        """Are batch *i*'s record offset deltas 0..n-1 (can it keep its offsets in a merge)?"""
        return bool(self.framing.in_sequence[i])

    def merge(self, groups: Sequence[tuple[int, int]]) -> list[MergedRecords | None]:
        """The merge of each group ``(i, j)`` of batches ``i .. j-1`` (following each other, in
        sequence), in uncompressed form; ``None`` for a group whose timestamps lie too far apart
        for one batch's deltas (int64)."""
        good: list[tuple[int, int]] = []
        heads: list[tuple[int, int, int] | None] = []
        group_lo: list[int] = []
        group_first: list[int] = []
        for i, j in groups:
            lo, hi = min(self._lows[i:j]), max(self._highs[i:j])
            bases = self._base_ts[i:j]
            count = sum(self._counts[i:j])
            if lo < _INT64_MIN or hi - lo > _INT64_MAX or max(bases) - lo > _INT64_MAX \
                    or min(bases) - lo < _INT64_MIN or count - 1 > _INT32_MAX:
                heads.append(None)
                continue
            good.append((i, j))
            heads.append((lo, hi, count))
            group_lo.append(lo)
            group_first.append(self._base_offset[i])
        sections = iter(self._reframe(good, group_lo, group_first))
        out: list[MergedRecords | None] = []
        for (i, _j), head in zip(groups, heads, strict=True):
            if head is None:
                out.append(None)
                continue
            lo, hi, count = head
            attributes = self.batches[i].attributes
            out.append(MergedRecords(attributes, self._base_offset[i], count, lo, hi, next(sections)))
        return out

    def remerge(self, i: int, j: int) -> MergedRecords | None:
        """:meth:`merge` of the one group ``(i, j)``."""
        (merged,) = self.merge([(i, j)])
        return merged

    def _reframe(self, groups: list[tuple[int, int]], lo: list[int], first: list[int]) -> list[bytes]:
        """Each batch's records shifted to its group's first offset and lowest timestamp."""
        if not groups:
            return []
        from mm2py.protocol.record_frames import reframe

        ts_shift = [0] * len(self.batches)
        off_shift = [0] * len(self.batches)
        for (i, j), group_lo, group_first in zip(groups, lo, first, strict=True):
            ts_shift[i:j] = [t - group_lo for t in self._base_ts[i:j]]
            off_shift[i:j] = [o - group_first for o in self._base_offset[i:j]]
        return reframe(self.framing, groups, ts_shift, off_shift)


def scan_runs(batches: Sequence[RecordBatch], *, verified: bool = False) -> RunScan:
    """CRC-check (unless ``verified``), decompress and parse the framing of eligible ``batches``.

    Raises :class:`CorruptBatchError` for the first batch that does not verify, decompress or
    hold exactly its declared records' framing."""
    import numpy as np

    from mm2py.protocol.record_frames import PAD, scan

    sections = SectionBuffer(sum(len(b) for b in batches) * 3 + PAD)
    append = sections.append
    starts: list[int] = []
    for b in batches:
        if not verified:
            b.verify()
        starts.append(sections.used)
        append(b.attributes & ATTR_CODEC_MASK, b.records_view)
    ends = [*starts[1:], sections.used]
    sections.reserve(PAD)
    buf = np.frombuffer(sections.close(), dtype=np.uint8)
    framing = scan(buf, np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64),
                   np.array([b.records_count for b in batches], dtype=np.int64),
                   lambda i: f"batch at offset {batches[i].base_offset}")
    return RunScan(batches, framing)


def merged_batch(merged: MergedRecords, *, lz4_level: int | None = None) -> RecordBatch:
    """The batch for ``merged``: compressed with its codec (``lz4_level``: see
    :func:`~mm2py.protocol.compression.compress`), producer fields and partitionLeaderEpoch -1
    (the producer stamps its own), CRC-32C computed."""
    codec = merged.codec
    body = merged.section if codec is Codec.NONE else compress(codec, merged.section, lz4_level=lz4_level)
    try:
        data = assemble_batch(
            body,
            records_count=merged.records_count,
            attributes=merged.attributes,
            last_offset_delta=merged.records_count - 1,
            base_offset=merged.base_offset,
            base_timestamp=merged.base_timestamp,
            max_timestamp=merged.max_timestamp,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            partition_leader_epoch=-1,
        )
    except struct.error as exc:
        raise ValueError(f"merged batch at offset {merged.base_offset} out of range: {exc}") from None
    return RecordBatch(data)


def merge_records(run: Sequence[RecordBatch]) -> MergedRecords:
    """The merge of ``run`` in uncompressed form: a pure function of the run's batches.

    Every batch is CRC-checked and its framing parsed (``CorruptBatchError`` on bad input). Raises
    ``ValueError`` when ``run`` is empty or cannot be merged (a batch not :func:`merge_eligible`,
    not :func:`follows` its predecessor, record offset deltas not 0..n-1, timestamps too far
    apart for one batch's deltas).
    """
    if not run:
        raise ValueError("empty run")
    for i, b in enumerate(run):
        if not merge_eligible(b) or (i and not follows(run[i - 1], b)):
            raise ValueError(f"batch at offset {b.base_offset} cannot be merged into this run")
    scanned = scan_runs(run)
    for i, b in enumerate(run):
        if not scanned.in_sequence(i):
            raise ValueError(f"batch at offset {b.base_offset}: record offsets are not 0..n-1")
    (merged,) = scanned.merge([(0, len(run))])
    if merged is None:
        raise ValueError(f"run at offset {run[0].base_offset} cannot be merged: timestamps too far apart")
    return merged


# ------------------------------------------------------------------------------- comparison
def _target_section(target: RecordBatch) -> bytes | None:
    """Decompressed records of a target batch, ``None`` when they do not decompress."""
    try:
        return records_section(target)
    except CorruptBatchError:
        return None


def same_content(expected: RecordBatch, target: RecordBatch) -> bool:
    """True if ``target`` holds the records of ``expected`` as the mirror writes them.

    ``expected`` is a batch the mirror produces (a :func:`coalesce` output, merged or not).
    Compares attributes (the transactional bit aside), lastOffsetDelta, baseTimestamp,
    maxTimestamp, recordsCount and the records; baseOffset, partitionLeaderEpoch, producer fields
    and CRC are the target's own. Records compare equal when the stored sections are byte-equal,
    or else when both decompress to the same bytes (codec output is not promised to be stable
    across library versions). Raises ``CorruptBatchError`` if ``expected``'s section does not
    decompress; a target section that does not is simply different.
    """
    e, t = expected.buf, target.buf
    if (
        expected.attributes & ~ATTR_TRANSACTIONAL != target.attributes & ~ATTR_TRANSACTIONAL
        or e[_FIELDS_A] != t[_FIELDS_A]
        or e[_FIELDS_B] != t[_FIELDS_B]
    ):
        return False
    if expected.records_view == target.records_view:
        return True
    if expected.codec is Codec.NONE:
        return False
    return records_section(expected) == _target_section(target)


def _same_as_merge(merged: MergedRecords, target: RecordBatch) -> bool:
    if (
        target.attributes & ~ATTR_TRANSACTIONAL != merged.attributes
        or target.records_count != merged.records_count
        or target.last_offset_delta != merged.records_count - 1
        or target.base_timestamp != merged.base_timestamp
        or target.max_timestamp != merged.max_timestamp
    ):
        return False
    return _target_section(target) == merged.section


def match_run(target: RecordBatch, sources: Sequence[RecordBatch]) -> int:
    """How many leading ``sources`` batches ``target`` holds, as :func:`coalesce` wrote them; 0
    if it does not hold exactly the records of a run of them.

    ``sources`` are the source batches from the source position the target batch should start
    at, as the fetcher hands them on (cropped, filtered), before :func:`coalesce`. The run
    is the prefix of ``sources`` whose record counts add up to ``target``'s (a merged batch has
    contiguous offsets, so there is at most one). A prefix of one batch is a passed-through batch
    and is compared with :func:`same_content`. A longer one must be mergeable and ``target`` must
    hold exactly :func:`merge_records` of it: attributes (transactional bit aside), timestamps,
    counts and the decompressed records. The answer does not depend on the ``threshold``,
    ``target`` or ``max_bytes`` in force when the batch was written, nor on fetch boundaries.

    Source batches are CRC-checked and parsed (``CorruptBatchError``); a target batch whose
    section does not decompress is a mismatch.
    """
    if not sources:
        return 0
    want = target.records_count
    first = sources[0]
    if first.records_count == want:
        first.verify()
        return 1 if same_content(first, target) else 0
    have = k = 0
    while k < len(sources) and have < want:
        have += sources[k].records_count
        k += 1
    if have != want or k < 2:
        return 0
    run = sources[:k]
    for i, b in enumerate(run):
        if not merge_eligible(b) or (i and not follows(run[i - 1], b)):
            return 0
    try:
        merged = merge_records(run)
    except ValueError:  # not mergeable after all (offset deltas, timestamp range)
        return 0
    return k if _same_as_merge(merged, target) else 0
