"""Encode and decode the individual records inside a v2 RecordBatch, and build whole batches.

Record layout (all varints are zigzag-encoded, as in protobuf ``sint32``/``sint64``)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value |
    headerCount varint | (headerKeyLength varint | headerKey | headerValueLength varint | value)*

A length of -1 encodes a null key / value / header value. Header keys are UTF-8 strings; they
are decoded with ``surrogateescape`` so that invalid UTF-8 still round-trips byte for byte.

Besides full decoding (:func:`decode_records`) this module offers a *raw* scan
(:func:`scan_raw_records`) that only parses the three leading fields of each record and keeps the
key/value/headers part as an opaque byte range; :func:`reframe_record` writes such a record back
with new deltas. That is what cropping and renumbering use, so they never materialise keys,
values or headers as Python objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crc32c import crc32c

from mm2py.protocol.compression import Codec, compress, decompress
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.records import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CRC_HEADER_STRUCT,
    MIN_BATCH_LENGTH,
    PREFIX_STRUCT,
    RecordBatch,
)

__all__ = [
    "RawRecord",
    "Record",
    "assemble_batch",
    "build_batch",
    "decode_records",
    "encode_record",
    "read_record_head",
    "read_varint",
    "read_varlong",
    "records_section",
    "reframe_record",
    "scan_raw_records",
    "varint_bytes",
]

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_MAGIC_2 = b"\x02"


@dataclass(frozen=True, slots=True)
class Record:
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    attributes: int = 0


#: (attributes, timestamp_delta, offset_delta, tail_start, tail_end) where ``data[tail_start:
#: tail_end]`` is the key/value/headers part of the record, unparsed.
RawRecord = tuple[int, int, int, int, int]


# ---------------------------------------------------------------------------------- varints
def _read_zigzag(
    buf: bytes | bytearray | memoryview, pos: int, max_shift: int, mask: int, what: str
) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > max_shift:
            raise CorruptBatchError(f"{what} is too long")
    result &= mask
    return (result >> 1) ^ -(result & 1), pos


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Zigzag int32 varint at ``pos``: (value, next position). At most 5 bytes, like Kafka."""
    return _read_zigzag(buf, pos, 28, 0xFFFFFFFF, "varint (more than 5 bytes)")


def read_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Zigzag int64 varint at ``pos``: (value, next position). At most 10 bytes."""
    return _read_zigzag(buf, pos, 63, 0xFFFFFFFFFFFFFFFF, "varlong (more than 10 bytes)")


_SMALL_VARINTS = [bytes([(v << 1) if v >= 0 else ((-v) << 1) - 1]) for v in range(-64, 64)]


def varint_bytes(value: int, *, long: bool = False) -> bytes:
    """Zigzag varint encoding of an int32 (or int64 with ``long=True``)."""
    if -64 <= value < 64:
        return _SMALL_VARINTS[value + 64]
    if long:
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"varlong out of int64 range: {value}")
    elif not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    u = (value << 1) if value >= 0 else ((-value) << 1) - 1
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


# ---------------------------------------------------------------------------------- decoding
def _skip_tail(data: bytes, p: int, end: int) -> int:
    """Validate key, value and headers starting at ``p``; return the position after them."""
    for _ in range(2):  # key, value
        n, p = read_varint(data, p)
        if n > 0:
            p += n
        elif n < -1:
            raise CorruptBatchError(f"invalid key/value length {n}")
    count, p = read_varint(data, p)
    if count < 0 or count > end - p:
        raise CorruptBatchError(f"invalid header count {count}")
    for _ in range(count):
        n, p = read_varint(data, p)
        if n < 0:
            raise CorruptBatchError(f"invalid header key length {n}")
        p += n
        n, p = read_varint(data, p)
        if n > 0:
            p += n
        elif n < -1:
            raise CorruptBatchError(f"invalid header value length {n}")
    if p > end:
        raise CorruptBatchError("record fields run past the record length")
    return p


def read_record_head(
    data: bytes | bytearray | memoryview, pos: int, limit: int, section_start: int = 0
) -> tuple[int, int, int, int, int]:
    """The framing of the record at ``pos`` of a records section that ends at ``limit``: (where
    the record ends, attributes, timestamp delta, offset delta, where its key starts). Raises
    :class:`CorruptBatchError` for a length below 1 or past ``limit`` (the byte it names counts
    from ``section_start``), and IndexError when ``data`` ends inside these fields."""
    length, p = read_varint(data, pos)
    end = p + length
    if length < 1 or end > limit:
        raise CorruptBatchError(f"invalid record length {length} at byte {pos - section_start}")
    ts_delta, q = read_varlong(data, p + 1)
    off_delta, q = read_varint(data, q)
    return end, data[p], ts_delta, off_delta, q


def scan_raw_records(data: bytes, count: int) -> list[RawRecord]:
    """Parse ``count`` records' framing from an uncompressed records section.

    Keys, values and headers are validated structurally but not copied. Raises
    :class:`CorruptBatchError` when the section does not hold exactly ``count`` well-formed records.
    """
    if count < 0:
        raise CorruptBatchError(f"negative records count {count}")
    out: list[RawRecord] = []
    pos = 0
    total = len(data)
    try:
        for _ in range(count):
            end, attrs, ts_delta, off_delta, p = read_record_head(data, pos, total)
            if _skip_tail(data, p, end) != end:
                raise CorruptBatchError(f"record at byte {pos} is shorter than its length")
            out.append((attrs, ts_delta, off_delta, p, end))
            pos = end
    except IndexError:
        raise CorruptBatchError("records section is truncated") from None
    if pos != total:
        raise CorruptBatchError(
            f"{total - pos} bytes remain after the declared {count} records"
        )
    return out


def _read_bytes(data: bytes, p: int, end: int) -> tuple[bytes | None, int]:
    n, p = read_varint(data, p)
    if n < 0:
        if n != -1:
            raise CorruptBatchError(f"invalid length {n}")
        return None, p
    q = p + n
    if q > end:
        raise CorruptBatchError("field runs past the record length")
    return data[p:q], q


def _decode_section(data: bytes, count: int) -> list[Record]:
    """Records of an uncompressed section: the framing checked by :func:`scan_raw_records`,
    then each record's key, value and headers read."""
    out: list[Record] = []
    try:
        for attrs, ts_delta, off_delta, p, end in scan_raw_records(data, count):
            key, p = _read_bytes(data, p, end)
            value, p = _read_bytes(data, p, end)
            hcount, p = read_varint(data, p)
            if hcount < 0 or hcount > end - p:
                raise CorruptBatchError(f"invalid header count {hcount}")
            headers: list[tuple[str, bytes | None]] = []
            for _ in range(hcount):
                hkey, p = _read_bytes(data, p, end)
                if hkey is None:
                    raise CorruptBatchError("null header key")
                hval, p = _read_bytes(data, p, end)
                headers.append((hkey.decode("utf-8", "surrogateescape"), hval))
            if p != end:
                raise CorruptBatchError(f"record ending at byte {end} does not fill its length")
            out.append(Record(off_delta, ts_delta, key, value, tuple(headers),
                              attrs - 256 if attrs > 127 else attrs))
    except IndexError:
        raise CorruptBatchError("records section is truncated") from None
    return out


def records_section(batch: RecordBatch) -> bytes:
    """The uncompressed records section of ``batch`` (decompressing if needed)."""
    codec = batch.codec
    view = batch.records_view
    return bytes(view) if codec is Codec.NONE else decompress(codec, view)


def decode_records(batch: RecordBatch) -> list[Record]:
    """All records of ``batch`` (decompressed when needed), in stored order."""
    return _decode_section(records_section(batch), batch.records_count)


# ---------------------------------------------------------------------------------- encoding
def _len_prefixed(value: bytes | None) -> bytes:
    if value is None:
        return b"\x01"  # zigzag(-1)
    return varint_bytes(len(value)) + value


def encode_record(rec: Record) -> bytes:
    """One record, length prefix included."""
    parts = [
        bytes((rec.attributes & 0xFF,)),
        varint_bytes(rec.timestamp_delta, long=True),
        varint_bytes(rec.offset_delta),
        _len_prefixed(rec.key),
        _len_prefixed(rec.value),
        varint_bytes(len(rec.headers)),
    ]
    for hkey, hval in rec.headers:
        parts.append(_len_prefixed(hkey.encode("utf-8", "surrogateescape")))
        parts.append(_len_prefixed(hval))
    body = b"".join(parts)
    return varint_bytes(len(body)) + body


def reframe_record(
    out: bytearray, attributes: int, timestamp_delta: int, offset_delta: int, tail: bytes
) -> None:
    """Append a record with new deltas and an already-encoded key/value/headers ``tail``."""
    ts = varint_bytes(timestamp_delta, long=True)
    off = varint_bytes(offset_delta)
    out += varint_bytes(1 + len(ts) + len(off) + len(tail))
    out.append(attributes & 0xFF)
    out += ts
    out += off
    out += tail


def assemble_batch(
    section: bytes | bytearray | memoryview,
    *,
    records_count: int,
    attributes: int,
    last_offset_delta: int,
    base_offset: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int,
) -> bytes:
    """Frame an already encoded (and, if the codec bits say so, compressed) records section.

    Computes batchLength and the CRC-32C. Raises ``struct.error`` on out-of-range fields.
    """
    crc_header = CRC_HEADER_STRUCT.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    crc = crc32c(section, crc32c(crc_header))
    prefix = PREFIX_STRUCT.pack(
        base_offset, MIN_BATCH_LENGTH + len(section), partition_leader_epoch
    )
    return b"".join((prefix, _MAGIC_2, crc.to_bytes(4, "big"), crc_header, section))


def build_batch(
    records: Sequence[Record],
    *,
    codec: Codec = Codec.NONE,
    base_offset: int = 0,
    base_timestamp: int,
    max_timestamp: int | None = None,
    timestamp_type: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    last_offset_delta: int | None = None,
) -> bytes:
    """A complete v2 batch holding ``records`` (with their own deltas), CRC included."""
    section = b"".join([encode_record(r) for r in records])
    if codec is not Codec.NONE:
        section = compress(codec, section)
    if last_offset_delta is None:
        last_offset_delta = max((r.offset_delta for r in records), default=0)
    if max_timestamp is None:
        max_timestamp = base_timestamp + max((r.timestamp_delta for r in records), default=0)
    attributes = int(codec) & 0x07
    if timestamp_type:
        attributes |= ATTR_TIMESTAMP_TYPE
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    return assemble_batch(
        section,
        records_count=len(records),
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_offset=base_offset,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
    )
