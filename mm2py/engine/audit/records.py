"""What the audit compares of a batch and of a record (pure).

**Batches.** A batch mm2py mirrored as it came keeps everything but the fields the target broker
needs rewritten (base offset, partition leader epoch, producer id, epoch and base sequence, the
transactional bit) and the CRC that covers them. :func:`batch_print` is the rest: records count,
last offset delta, both timestamps, the attribute bits the mirror keeps (codec, timestamp type,
control, delete horizon) and a CRC-32C of the records section (the bytes after the 61-byte
header). Two batches with the same print hold the same records with the same offsets deltas and
timestamps, compared without decompressing anything.

**Records.** Where batches were cropped, merged, rebuilt or written by another mirror (Apache
MirrorMaker 2 batches records its own way), records are compared one by one: :func:`records_of`
decompresses a batch and gives each record's offset and content, ``(timestamp, body)``, the body
being the record's key, value and headers exactly as encoded (so equal bodies are equal keys,
values and headers) and the timestamp the one a consumer sees (the batch's ``maxTimestamp`` for
LogAppendTime). :func:`difference` says which of those differ.
"""

from __future__ import annotations

from typing import NamedTuple

from crc32c import crc32c

from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.record_codec import read_varint, records_section
from mm2py.protocol.records import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    RecordBatch,
)

__all__ = ["BatchPrint", "Rec", "Records", "batch_print", "difference", "keys_and_values", "records_of"]

#: the attribute bits a mirrored batch keeps (the transactional bit is cleared by the mirror's
#: producer, which is idempotent, not transactional)
KEPT_ATTRIBUTES = ATTR_CODEC_MASK | ATTR_TIMESTAMP_TYPE | ATTR_CONTROL | ATTR_DELETE_HORIZON

# indexes into RecordBatch.fields
_ATTRS, _LAST_DELTA, _BASE_TS, _MAX_TS, _COUNT = 5, 6, 7, 8, 12

#: (records count, last offset delta, base timestamp, max timestamp, kept attributes, CRC-32C of
#: the records section)
BatchPrint = tuple[int, int, int, int, int, int]


def batch_print(batch: RecordBatch) -> BatchPrint:
    """What the mirror leaves alone in ``batch`` (see the module docstring)."""
    h = batch.fields
    return (h[_COUNT], h[_LAST_DELTA], h[_BASE_TS], h[_MAX_TS], h[_ATTRS] & KEPT_ATTRIBUTES,
            crc32c(batch.buf[HEADER_SIZE:]))


class Rec(NamedTuple):
    """One record as the audit compares it: ``(timestamp, body)`` is its content."""

    offset: int
    timestamp: int
    #: key, value and headers as encoded in the batch
    body: bytes


class Records(NamedTuple):
    """The records of a batch: their offsets and their contents, ``(timestamp, body)`` each (kept
    apart, so that runs of records compare as two lists, in one step)."""

    offsets: list[int]
    contents: list[tuple[int, bytes]]

    def rec(self, i: int) -> Rec:
        ts, body = self.contents[i]
        return Rec(self.offsets[i], ts, body)


def _zigzag(data: bytes, p: int, limit: int) -> tuple[int, int]:
    """A zigzag varint of at most ``limit`` bytes at ``p``: (value, next position)."""
    b = data[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    v, shift, q = b & 0x7F, 7, p + 1
    while True:
        b = data[q]
        q += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return (v >> 1) ^ -(v & 1), q
        shift += 7
        if q - p >= limit:
            raise CorruptBatchError("varint too long")


def records_of(batch: RecordBatch) -> Records:
    """Every record of ``batch``, decompressed, in stored order; each record's body (key, value and
    headers) is taken as it is, its structure unchecked (equal bodies are equal records; a body
    that differs is read field by field by :func:`difference`). Raises :class:`CorruptBatchError`."""
    data = records_section(batch)
    base, base_ts = batch.base_offset, batch.base_timestamp
    fixed_ts = batch.max_timestamp if batch.timestamp_type == 1 else None  # LogAppendTime
    offsets: list[int] = []
    contents: list[tuple[int, bytes]] = []
    pos, end = 0, len(data)
    try:
        for _ in range(batch.records_count):
            # each varint read in line when it is one byte long (the common case), else by _zigzag
            b = data[pos]
            length, p = ((b >> 1) ^ -(b & 1), pos + 1) if b < 0x80 else _zigzag(data, pos, 5)
            stop = p + length
            if length < 1 or stop > end:
                raise CorruptBatchError(f"invalid record length {length} at byte {pos}")
            b = data[p + 1]  # after the attributes byte
            ts, p = ((b >> 1) ^ -(b & 1), p + 2) if b < 0x80 else _zigzag(data, p + 1, 10)
            b = data[p]
            off, p = ((b >> 1) ^ -(b & 1), p + 1) if b < 0x80 else _zigzag(data, p, 5)
            if p > stop:
                raise CorruptBatchError(f"record at byte {pos} is shorter than its header")
            offsets.append(base + off)
            contents.append((base_ts + ts if fixed_ts is None else fixed_ts, data[p:stop]))
            pos = stop
    except IndexError:
        raise CorruptBatchError("records section is truncated") from None
    if pos != end:
        raise CorruptBatchError(f"{end - pos} bytes remain after the declared records")
    return Records(offsets, contents)


def _varint(data: bytes, p: int) -> tuple[int, int]:
    b = data[p]
    if b < 0x80:  # one byte: most lengths of small records
        return (b >> 1) ^ -(b & 1), p + 1
    return read_varint(data, p)


def keys_and_values(batch: RecordBatch) -> list[tuple[bytes | None, bytes | None]]:
    """The key and value of every record of ``batch`` (an internal topic's: offset syncs, stored
    positions), read without the rest of each record. Raises :class:`CorruptBatchError`."""
    data = records_section(batch)
    out: list[tuple[bytes | None, bytes | None]] = []
    pos, end = 0, len(data)
    try:
        for _ in range(batch.records_count):
            length, p = _varint(data, pos)
            stop = p + length
            if length < 1 or stop > end:
                raise CorruptBatchError(f"invalid record length {length} at byte {pos}")
            p += 1  # attributes
            while data[p] & 0x80:  # timestamp delta
                p += 1
            p += 1
            while data[p] & 0x80:  # offset delta
                p += 1
            n, p = _varint(data, p + 1)
            key = None if n < 0 else data[p:p + n]
            n, p = _varint(data, p + max(n, 0))
            value = None if n < 0 else data[p:p + n]
            if p + max(n, 0) > stop:
                raise CorruptBatchError(f"record at byte {pos} runs past its length")
            out.append((key, value))
            pos = stop
    except IndexError:
        raise CorruptBatchError("records section is truncated") from None
    return out


Fields = tuple[bytes | None, bytes | None, tuple[tuple[bytes, bytes | None], ...]]


def _field(body: bytes, p: int) -> tuple[bytes | None, int]:
    n, p = read_varint(body, p)
    if n < 0:
        return None, p
    return body[p:p + n], p + n


def parse_body(body: bytes) -> Fields:
    """(key, value, headers) of a record body (validated when it was read)."""
    try:
        key, p = _field(body, 0)
        value, p = _field(body, p)
        count, p = read_varint(body, p)
        headers = []
        for _ in range(count):
            hkey, p = _field(body, p)
            hval, p = _field(body, p)
            headers.append((hkey or b"", hval))
    except IndexError:
        raise CorruptBatchError("record body is truncated") from None
    return key, value, tuple(headers)


def _shown(value: bytes | None, limit: int = 40) -> str:
    if value is None:
        return "null"
    text = repr(value[:limit])
    return text + (f"... ({len(value)} bytes)" if len(value) > limit else "")


def difference(source: Rec, target: Rec) -> str:
    """Which of key, value, headers and timestamp differ between two records, with both values."""
    skey, svalue, sheaders = parse_body(source.body)
    tkey, tvalue, theaders = parse_body(target.body)
    parts = []
    if skey != tkey:
        parts.append(f"key {_shown(skey)} != {_shown(tkey)}")
    if svalue != tvalue:
        parts.append(f"value {_shown(svalue)} != {_shown(tvalue)}")
    if sheaders != theaders:
        parts.append(f"headers {list(sheaders)!r:.120} != {list(theaders)!r:.120}")
    if source.timestamp != target.timestamp:
        parts.append(f"timestamp {source.timestamp} != {target.timestamp}")
    return "; ".join(parts) or "record bodies encoded differently"
