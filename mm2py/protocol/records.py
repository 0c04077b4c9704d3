"""Zero-copy views over Kafka RecordBatch v2 (magic 2) bytes.

A :class:`RecordBatch` wraps a ``memoryview`` of exactly one complete batch and exposes the 61-byte
header as properties. Nothing is copied or decompressed until a caller asks for it.
:func:`iter_batches` walks a record set (e.g. the ``records`` field of a Fetch response partition)
and stops quietly at a truncated trailing batch, as brokers may send one.

Header layout (big-endian)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordsCount int32 | records...

The CRC-32C covers bytes 21..end (attributes onward).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from crc32c import crc32c

from mm2py.protocol import native
from mm2py.protocol.compression import Codec
from mm2py.protocol.errors import CorruptBatchError, UnsupportedError

__all__ = [
    "ATTR_CODEC_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "CRC_OFFSET",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "RecordBatch",
    "iter_batches",
    "split_checked",
    "split_record_set",
]

HEADER_SIZE = 61
#: baseOffset + batchLength: the bytes not counted by batchLength.
LOG_OVERHEAD = 12
#: Smallest legal batchLength of a v2 batch (header without the first 12 bytes).
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
#: Smallest legacy (magic 0) message size; anything below cannot be a record set entry at all.
_MIN_LEGACY_LENGTH = 14
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21

ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

#: Whole 61-byte header.
HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
#: baseOffset, batchLength, partitionLeaderEpoch (outside the CRC range).
PREFIX_STRUCT = struct.Struct(">qii")
#: attributes .. recordsCount (bytes 21..61, inside the CRC range).
CRC_HEADER_STRUCT = struct.Struct(">hiqqqhii")
_LENGTH_STRUCT = struct.Struct(">qi")

# Indexes into the unpacked header tuple.
_BASE_OFFSET, _BATCH_LENGTH, _PLE, _MAGIC, _CRC, _ATTRS = 0, 1, 2, 3, 4, 5
_LAST_DELTA, _BASE_TS, _MAX_TS, _PID, _EPOCH, _BASE_SEQ, _COUNT = 6, 7, 8, 9, 10, 11, 12


def _as_view(buf: bytes | bytearray | memoryview) -> memoryview:
    mv = memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


class RecordBatch:
    """Read-only view over one complete v2 record batch."""

    __slots__ = ("_h", "buf")

    buf: memoryview
    _h: tuple[int, ...]

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        mv = _as_view(buf)
        n = len(mv)
        if n < MAGIC_OFFSET + 1:
            raise CorruptBatchError(f"record batch too short: {n} bytes")
        magic = mv[MAGIC_OFFSET]
        if magic in (0, 1):
            raise UnsupportedError(f"legacy message format magic {magic} is not supported")
        if magic != 2:
            raise CorruptBatchError(f"invalid record batch magic {magic}")
        if n < HEADER_SIZE:
            raise CorruptBatchError(f"record batch too short: {n} bytes < {HEADER_SIZE}")
        header = HEADER_STRUCT.unpack_from(mv, 0)
        if header[_BATCH_LENGTH] + LOG_OVERHEAD != n:
            raise CorruptBatchError(
                f"batch at offset {header[_BASE_OFFSET]}: batchLength {header[_BATCH_LENGTH]}"
                f" does not match buffer size {n}"
            )
        self.buf = mv
        self._h = header

    def __getattr__(self, name: str) -> tuple[int, ...]:
        # Only reached for a slot that is unset. The compiled split (mm2py.protocol.native) builds
        # views without their header tuple: most small batches are only planned and merged, which
        # read their bytes. The header is unpacked here on first use and kept.
        if name != "_h":
            raise AttributeError(name)
        header: tuple[int, ...] = HEADER_STRUCT.unpack_from(self.buf, 0)
        self._h = header
        return header

    @classmethod
    def _trusted(cls, mv: memoryview, header: tuple[int, ...]) -> RecordBatch:
        """Build a view without re-validating (the caller already checked size and magic)."""
        self = cls.__new__(cls)
        self.buf = mv
        self._h = header
        return self

    # ------------------------------------------------------------------ header fields
    @property
    def fields(self) -> tuple[int, ...]:
        """All header fields at once, in wire order (:data:`HEADER_STRUCT`): baseOffset,
        batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
        maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount."""
        return self._h

    @property
    def base_offset(self) -> int:
        return self._h[_BASE_OFFSET]

    @property
    def batch_length(self) -> int:
        return self._h[_BATCH_LENGTH]

    @property
    def size(self) -> int:
        return self._h[_BATCH_LENGTH] + LOG_OVERHEAD

    @property
    def partition_leader_epoch(self) -> int:
        return self._h[_PLE]

    @property
    def magic(self) -> int:
        return self._h[_MAGIC]

    @property
    def crc(self) -> int:
        return self._h[_CRC]

    @property
    def attributes(self) -> int:
        return self._h[_ATTRS]

    @property
    def codec(self) -> Codec:
        cid = self._h[_ATTRS] & ATTR_CODEC_MASK
        if cid > Codec.ZSTD:
            raise CorruptBatchError(
                f"batch at offset {self.base_offset}: unknown compression codec id {cid}"
            )
        return Codec(cid)

    @property
    def timestamp_type(self) -> int:
        return 1 if self._h[_ATTRS] & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self._h[_ATTRS] & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self._h[_ATTRS] & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self._h[_ATTRS] & ATTR_DELETE_HORIZON)

    @property
    def last_offset_delta(self) -> int:
        return self._h[_LAST_DELTA]

    @property
    def last_offset(self) -> int:
        return self._h[_BASE_OFFSET] + self._h[_LAST_DELTA]

    @property
    def next_offset(self) -> int:
        return self._h[_BASE_OFFSET] + self._h[_LAST_DELTA] + 1

    @property
    def base_timestamp(self) -> int:
        return self._h[_BASE_TS]

    @property
    def max_timestamp(self) -> int:
        return self._h[_MAX_TS]

    @property
    def producer_id(self) -> int:
        return self._h[_PID]

    @property
    def producer_epoch(self) -> int:
        return self._h[_EPOCH]

    @property
    def base_sequence(self) -> int:
        return self._h[_BASE_SEQ]

    @property
    def records_count(self) -> int:
        return self._h[_COUNT]

    @property
    def records_view(self) -> memoryview:
        """The (possibly compressed) records section, bytes 61..end, without copying."""
        return self.buf[HEADER_SIZE:]

    # ------------------------------------------------------------------ checks
    def compute_crc(self) -> int:
        """CRC-32C of bytes 21..end as it should be stored in the header."""
        return int(crc32c(self.buf[ATTRIBUTES_OFFSET:]))

    def crc_ok(self) -> bool:
        return self.compute_crc() == self._h[_CRC]

    def verify(self) -> None:
        actual = self.compute_crc()
        if actual != self._h[_CRC]:
            raise CorruptBatchError(
                f"CRC mismatch in batch at offset {self.base_offset}: header says "
                f"0x{self._h[_CRC]:08x}, computed 0x{actual:08x}"
            )

    def is_contiguous(self) -> bool:
        return self._h[_COUNT] == self._h[_LAST_DELTA] + 1

    # ------------------------------------------------------------------ rewrites
    def rebased(self, base_offset: int, partition_leader_epoch: int = -1) -> bytes:
        """Copy with baseOffset and partitionLeaderEpoch replaced (both outside the CRC range)."""
        return b"".join(
            (
                PREFIX_STRUCT.pack(base_offset, self._h[_BATCH_LENGTH], partition_leader_epoch),
                self.buf[MAGIC_OFFSET:],
            )
        )

    def __bytes__(self) -> bytes:
        return self.buf.tobytes()

    def __len__(self) -> int:
        return len(self.buf)

    def __repr__(self) -> str:
        h = self._h
        return (
            f"RecordBatch(base_offset={h[_BASE_OFFSET]}, last_offset_delta={h[_LAST_DELTA]},"
            f" records={h[_COUNT]}, size={len(self.buf)}, attributes=0x{h[_ATTRS] & 0xFFFF:04x},"
            f" producer_id={h[_PID]})"
        )


def iter_batches(data: bytes | bytearray | memoryview) -> Iterator[RecordBatch]:
    """Yield each complete batch of a record set as a zero-copy :class:`RecordBatch`.

    Stops without error at a truncated trailing batch. Raises :class:`CorruptBatchError` for a
    header that cannot be valid and :class:`UnsupportedError` for legacy (magic 0/1) entries.
    CRCs are not checked here.
    """
    mv = _as_view(data)
    end = len(mv)
    pos = 0
    unpack_len = _LENGTH_STRUCT.unpack_from
    unpack_header = HEADER_STRUCT.unpack_from
    while end - pos >= LOG_OVERHEAD:
        base_offset, batch_length = unpack_len(mv, pos)
        if batch_length < _MIN_LEGACY_LENGTH:
            raise CorruptBatchError(
                f"record set entry at byte {pos} (offset {base_offset}) has invalid size "
                f"{batch_length}"
            )
        if end - pos <= MAGIC_OFFSET:
            return
        magic = mv[pos + MAGIC_OFFSET]
        if magic != 2:
            if magic in (0, 1):
                raise UnsupportedError(
                    f"legacy message format magic {magic} at offset {base_offset} is not supported"
                )
            raise CorruptBatchError(f"invalid magic {magic} in batch at offset {base_offset}")
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptBatchError(
                f"batch at offset {base_offset} has batchLength {batch_length} < "
                f"{MIN_BATCH_LENGTH}"
            )
        stop = pos + batch_length + LOG_OVERHEAD
        if stop > end:
            return
        yield RecordBatch._trusted(mv[pos:stop], unpack_header(mv, pos))
        pos = stop


def split_record_set(data: bytes | bytearray | memoryview) -> tuple[list[RecordBatch], int]:
    """Return the complete batches of a record set and the number of trailing bytes left over."""
    batches = list(iter_batches(data))
    used = sum(len(b.buf) for b in batches)
    return batches, len(_as_view(data)) - used


def split_checked(data: bytes | bytearray | memoryview) -> tuple[list[RecordBatch], int, int] | None:
    """:func:`split_record_set` with every batch's CRC checked, by the compiled path, and flags
    (:data:`~mm2py.protocol.native.CONTROL_SEEN`, ``TRANSACTIONAL_SEEN``, ``OUT_OF_ORDER``). ``None`` when the
    compiled path is not built or refuses the input (a header that cannot be valid, a CRC
    mismatch): then :func:`split_record_set` and :meth:`RecordBatch.verify` say what is wrong."""
    return native.split(_as_view(data), RecordBatch, True)
