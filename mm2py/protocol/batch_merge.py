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

from mm2py.protocol.compression import Codec, compress
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.record_codec import (
    RawRecord,
    assemble_batch,
    read_varint,
    read_varlong,
    records_section,
    varint_bytes,
)
from mm2py.protocol.records import ATTR_CODEC_MASK, ATTR_TRANSACTIONAL, RecordBatch

__all__ = [
    "MergedRecords",
    "Scanned",
    "follows",
    "match_run",
    "merge_eligible",
    "merge_records",
    "merge_scanned",
    "merged_batch",
    "same_content",
    "scan_for_merge",
]

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
    attrs = batch.attributes
    return (
        batch.magic == 2
        and attrs & ~ATTR_CODEC_MASK == 0
        and attrs <= Codec.ZSTD
        and batch.records_count >= 1
        and batch.records_count == batch.last_offset_delta + 1
    )


def follows(prev: RecordBatch, nxt: RecordBatch) -> bool:
    """May ``nxt`` join a run ending with ``prev``? No offset gap, the same attributes.

    Both batches are assumed :func:`merge_eligible`.
    """
    return nxt.base_offset == prev.last_offset + 1 and nxt.attributes == prev.attributes


# ------------------------------------------------------------------------------- decoding
Scanned = tuple[bytes, list[RawRecord]]


def _frames(section: bytes, count: int) -> list[RawRecord]:
    """Each record's framing: attributes, timestamp and offset deltas, and where its key, value
    and headers lie. Lighter than :func:`~mm2py.protocol.record_codec.scan_raw_records`: the
    key/value/headers bytes are carried into the merged batch as they are, unparsed, just as a
    passed-through batch carries them (the target broker validates every record it appends).
    Raises :class:`CorruptBatchError` when the framing does not hold ``count`` records exactly."""
    out: list[RawRecord] = []
    pos = 0
    total = len(section)
    try:
        for _ in range(count):
            length, p = read_varint(section, pos)
            end = p + length
            if length < 1 or end > total:
                raise CorruptBatchError(f"invalid record length {length} at byte {pos}")
            attrs = section[p]
            ts_delta, p = read_varlong(section, p + 1)
            off_delta, p = read_varint(section, p)
            if p > end:
                raise CorruptBatchError(f"record at byte {pos} is shorter than its header")
            out.append((attrs, ts_delta, off_delta, p, end))
            pos = end
    except IndexError:
        raise CorruptBatchError("records section is truncated") from None
    if pos != total:
        raise CorruptBatchError(f"{total - pos} bytes remain after the declared {count} records")
    return out


def scan_for_merge(batch: RecordBatch) -> Scanned | None:
    """CRC-verified, decompressed records section of an eligible batch and its records' framing;
    ``None`` when its record offset deltas are not 0..n-1 (it cannot keep its offsets in a merge)."""
    batch.verify()
    section = records_section(batch)
    raws = _frames(section, batch.records_count)
    for i, raw in enumerate(raws):
        if raw[2] != i:
            return None
    return section, raws


#: zigzag varints of -8192..8191 (one or two bytes): record lengths and deltas in merged batches
_SMALL = 8192
_VARINTS = [varint_bytes(v) for v in range(-_SMALL, _SMALL)]


def _varint(value: int) -> bytes:
    return _VARINTS[value + _SMALL] if -_SMALL <= value < _SMALL else varint_bytes(value, long=True)


def _reframe(out: bytearray, section: bytes, raws: list[RawRecord], ts_shift: int, off_shift: int) -> None:
    """Append ``raws`` with their deltas shifted (the loop the merge spends its time in)."""
    view = memoryview(section)
    small = _SMALL
    table = _VARINTS
    for attrs, ts_delta, off_delta, t0, t1 in raws:
        ts = ts_delta + ts_shift
        off = off_delta + off_shift
        ts_b = table[ts + small] if -small <= ts < small else varint_bytes(ts, long=True)
        off_b = table[off + small] if off < small else varint_bytes(off)
        out += _varint(1 + len(ts_b) + len(off_b) + t1 - t0)
        out.append(attrs)
        out += ts_b
        out += off_b
        out += view[t0:t1]


def merge_scanned(run: Sequence[RecordBatch], scanned: Sequence[Scanned]) -> MergedRecords:
    """Concatenate the re-framed records of ``run`` (eligible, following each other).

    Raises ``ValueError``/``OverflowError`` when a timestamp delta does not fit a varlong.
    """
    lows: list[int] = []
    highs: list[int] = []
    for b, (_section, raws) in zip(run, scanned, strict=True):
        deltas = [r[1] for r in raws]
        lows.append(b.base_timestamp + min(deltas))
        highs.append(b.base_timestamp + max(deltas))
    lo, hi = min(lows), max(highs)
    first_offset = run[0].base_offset
    out = bytearray()
    count = 0
    for b, (section, raws) in zip(run, scanned, strict=True):
        off_shift = b.base_offset - first_offset
        ts_shift = b.base_timestamp - lo
        count += len(raws)
        if off_shift == 0 and ts_shift == 0:
            out += section  # already framed for the merged base offset and timestamp
            continue
        _reframe(out, section, raws, ts_shift, off_shift)
    return MergedRecords(run[0].attributes, first_offset, count, lo, hi, bytes(out))


def merged_batch(merged: MergedRecords) -> RecordBatch:
    """The batch for ``merged``: compressed with its codec, producer fields and
    partitionLeaderEpoch -1 (the producer stamps its own), CRC-32C computed."""
    codec = merged.codec
    body = merged.section if codec is Codec.NONE else compress(codec, merged.section)
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
    scanned: list[Scanned] = []
    for b in run:
        s = scan_for_merge(b)
        if s is None:
            raise ValueError(f"batch at offset {b.base_offset}: record offsets are not 0..n-1")
        scanned.append(s)
    try:
        return merge_scanned(run, scanned)
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"run at offset {run[0].base_offset} cannot be merged: {exc}") from None


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
    at, prepared as the mirror prepares them before :func:`coalesce` (cropped, filtered). The run
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
