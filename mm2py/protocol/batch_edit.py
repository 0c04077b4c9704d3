"""Rewrites of whole record batches for the mirror's produce path.

* :func:`strip_producer_state` / :func:`set_producer_state` / :func:`for_produce` touch only the
  40 header bytes inside the CRC range and carry the batch's CRC-32C over the edit (``crc.py``):
  the records section is copied verbatim (never decompressed, never read), and one that changed
  since its CRC was checked keeps a CRC that does not match it.
* :func:`crop` drops the records below an offset (first batch of a Fetch response);
  :func:`rebuild_contiguous` renumbers the records of a batch with offset gaps (compacted topics),
  which a target broker would otherwise reject. Both keep the codec: records are reframed with
  new deltas but their key/value/headers bytes are carried over unparsed.

Every function raises only :class:`~mm2py.protocol.errors.ProtocolError` subclasses on bad input.
"""

from __future__ import annotations

import itertools
import struct

from mm2py.protocol.compression import Codec, compress
from mm2py.protocol.crc import carry_over
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.record_codec import (
    RawRecord,
    assemble_batch,
    read_varint,
    read_varlong,
    records_section,
    reframe_record,
    scan_raw_records,
)
from mm2py.protocol.records import (
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    CRC_HEADER_STRUCT,
    CRC_OFFSET,
    HEADER_SIZE,
    RecordBatch,
)

__all__ = [
    "crop",
    "increment_sequence",
    "needs_rebuild",
    "rebuild_contiguous",
    "reencode",
    "set_producer_state",
    "strip_producer_state",
]

_INT32_MAX = (1 << 31) - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """Producer sequence arithmetic as Kafka does it (wraps from INT32_MAX to 0)."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


# ------------------------------------------------------------------------- producer state
def _with_producer_state(
    batch: RecordBatch,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool,
    verify: bool,
    prefix: bytes | memoryview | None = None,
) -> bytes:
    """A copy with new producer fields and CRC; ``prefix`` replaces bytes 0..17 (offset, length,
    leader epoch, magic) when given."""
    if verify:
        # Never re-seal a corrupt batch with a fresh, valid CRC.
        batch.verify()
    attributes = batch.attributes & ~ATTR_TRANSACTIONAL
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    try:
        crc_header = CRC_HEADER_STRUCT.pack(
            attributes,
            batch.last_offset_delta,
            batch.base_timestamp,
            batch.max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            batch.records_count,
        )
    except struct.error as exc:
        raise ValueError(f"producer state out of range: {exc}") from None
    records = batch.records_view
    # carried over from the batch's own CRC (checked above, or by the caller when it fetched the
    # batch), not computed from the records again: records changed since cannot be sealed (crc.py)
    crc = carry_over(batch.crc, batch.buf[ATTRIBUTES_OFFSET:HEADER_SIZE], crc_header, len(records))
    head = batch.buf[:CRC_OFFSET] if prefix is None else prefix
    return b"".join((head, crc.to_bytes(4, "big"), crc_header, records))


_PRODUCE_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic


def for_produce(
    batch: RecordBatch,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    *,
    verify: bool = True,
) -> bytes:
    """The batch as a Produce request carries it, in one copy: baseOffset 0, partitionLeaderEpoch
    -1, the given producer state (``-1``s strip it), transactional bit off, CRC recomputed.

    Records are untouched (no decompression). The source CRC is checked first unless
    ``verify=False`` says the caller already did.
    """
    prefix = _PRODUCE_PREFIX.pack(0, batch.batch_length, -1, batch.magic)
    return _with_producer_state(
        batch, producer_id, producer_epoch, base_sequence, False, verify, prefix
    )


def strip_producer_state(batch: RecordBatch, *, verify: bool = True) -> bytes:
    """Copy of ``batch`` with producerId/epoch/baseSequence = -1 and the transactional bit off.

    The source CRC is checked first (``CorruptBatchError`` if wrong) unless ``verify=False``
    says the caller already did. A batch that carries no producer state is returned as a plain
    copy.
    """
    if (
        batch.producer_id == -1
        and batch.producer_epoch == -1
        and batch.base_sequence == -1
        and not batch.is_transactional
    ):
        if verify:
            batch.verify()
        return bytes(batch)
    return _with_producer_state(batch, -1, -1, -1, False, verify)


def set_producer_state(
    batch: RecordBatch,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    *,
    transactional: bool = False,
    verify: bool = True,
) -> bytes:
    """Copy of ``batch`` carrying the given producer state (the mirror's idempotent producer).

    The transactional bit is cleared unless ``transactional=True``. Raises ``ValueError`` for
    out-of-range arguments and ``CorruptBatchError`` for a bad source CRC (when verifying).
    """
    return _with_producer_state(
        batch, producer_id, producer_epoch, base_sequence, transactional, verify
    )


# ------------------------------------------------------------------------- record-level edits
def reencode(
    batch: RecordBatch,
    section: bytes,
    kept: list[RawRecord],
    *,
    base_offset: int,
    offset_deltas: list[int],
    base_timestamp: int,
    max_timestamp: int,
    last_offset_delta: int,
    base_sequence: int,
) -> RecordBatch:
    """``kept`` records of ``batch`` (framings read from its uncompressed ``section``) as a new
    batch with the same codec and attributes: each record reframed with its offset delta and its
    timestamp delta from ``base_timestamp``, key, value and headers copied as they are."""
    old_base_ts = batch.base_timestamp
    out = bytearray()
    try:
        for (attrs, ts_delta, _off, t0, t1), off in zip(kept, offset_deltas, strict=True):
            reframe_record(out, attrs, old_base_ts + ts_delta - base_timestamp, off, section[t0:t1])
        codec = batch.codec
        body: bytes | bytearray = out if codec is Codec.NONE else compress(codec, out)
        data = assemble_batch(
            body,
            records_count=len(kept),
            attributes=batch.attributes,
            last_offset_delta=last_offset_delta,
            base_offset=base_offset,
            base_timestamp=base_timestamp,
            max_timestamp=max_timestamp,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=base_sequence,
            partition_leader_epoch=batch.partition_leader_epoch,
        )
    except (ValueError, OverflowError, struct.error) as exc:
        raise CorruptBatchError(
            f"batch at offset {batch.base_offset} cannot be re-encoded: {exc}"
        ) from None
    return RecordBatch(data)


def crop(batch: RecordBatch, start_offset: int) -> RecordBatch | None:
    """Keep only the records at or after ``start_offset``.

    Returns ``batch`` itself when nothing is below ``start_offset`` and ``None`` when nothing is
    left. Otherwise a new batch, same codec and attributes, whose baseOffset is the first kept
    record's offset; every kept record keeps its absolute offset, timestamp and sequence, and
    the batch keeps its last offset (so ``next_offset`` is unchanged). baseTimestamp becomes the
    first kept record's timestamp (unless the batch carries a delete horizon there), and
    maxTimestamp is recomputed for CreateTime batches.
    """
    base = batch.base_offset
    if start_offset <= base:
        return batch
    if start_offset > batch.last_offset:
        return None
    section = records_section(batch)
    raws = scan_raw_records(section, batch.records_count)
    first = next((i for i, r in enumerate(raws) if base + r[2] >= start_offset), None)
    if first is None:
        return None
    kept = raws[first:]
    new_base = base + kept[0][2]
    old_ts = batch.base_timestamp
    abs_ts = [old_ts + r[1] for r in kept]
    new_base_ts = old_ts if batch.has_delete_horizon else abs_ts[0]
    max_ts = batch.max_timestamp if batch.timestamp_type == 1 else max(abs_ts)
    seq = batch.base_sequence
    return reencode(
        batch,
        section,
        kept,
        base_offset=new_base,
        offset_deltas=[base + r[2] - new_base for r in kept],
        base_timestamp=new_base_ts,
        max_timestamp=max_ts,
        last_offset_delta=batch.last_offset - new_base,
        base_sequence=increment_sequence(seq, new_base - base) if seq >= 0 else seq,
    )


def rebuild_contiguous(batch: RecordBatch) -> tuple[RecordBatch, list[int]]:
    """Renumber the records of ``batch`` to consecutive offsets, same codec.

    The new batch starts at the first record's original offset, its deltas run 0..n-1 and
    lastOffsetDelta is n-1. Timestamps are unchanged. Returns the batch and the original
    absolute offset of each record (index i = record now at ``new.base_offset + i``). An empty
    batch (no records) is returned as is with an empty list; it carries no data to mirror.
    """
    count = batch.records_count
    if count == 0:
        return batch, []
    section = records_section(batch)
    raws = scan_raw_records(section, count)
    base = batch.base_offset
    offsets = [base + r[2] for r in raws]
    for prev, cur in itertools.pairwise(offsets):
        if cur <= prev:
            raise CorruptBatchError(
                f"batch at offset {base}: record offsets are not increasing ({prev} then {cur})"
            )
    new_base = offsets[0]
    seq = batch.base_sequence
    rebuilt = reencode(
        batch,
        section,
        raws,
        base_offset=new_base,
        offset_deltas=list(range(len(raws))),
        base_timestamp=batch.base_timestamp,
        max_timestamp=batch.max_timestamp,
        last_offset_delta=len(raws) - 1,
        base_sequence=increment_sequence(seq, new_base - base) if seq >= 0 else seq,
    )
    return rebuilt, offsets


def needs_rebuild(batch: RecordBatch) -> bool:
    """True when a target broker would reject ``batch`` for offset gaps.

    Header check (recordsCount == lastOffsetDelta + 1); for uncompressed batches the record
    offset deltas are also checked to run 0..n-1 (a cheap scan that skips keys and values).
    """
    if not batch.is_contiguous():
        return True
    if batch.codec is not Codec.NONE:
        return False
    data = batch.buf
    end = len(data)
    pos = HEADER_SIZE
    try:
        for i in range(batch.records_count):
            length, body = read_varint(data, pos)
            _ts, p = read_varlong(data, body + 1)
            off, _ = read_varint(data, p)
            if off != i:
                return True
            pos = body + length
            if length < 1 or pos > end:
                raise CorruptBatchError(f"invalid record length {length}")
    except IndexError:
        raise CorruptBatchError("records section is truncated") from None
    if pos != end:
        raise CorruptBatchError(f"{end - pos} bytes remain after the declared records")
    return False
