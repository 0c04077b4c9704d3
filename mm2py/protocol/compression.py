"""Kafka record-batch compression codecs (attributes bits 0-2) on top of ``cramjam``.

Wire formats, as the Java client reads and writes them:

* GZIP: RFC 1952 members (several concatenated members are accepted on read).
* SNAPPY: the Java client writes the *xerial* framing of snappy-java (an 8-byte magic, two int32
  version words, then chunks of ``int32 length`` + raw snappy block). librdkafka writes raw snappy
  blocks and reads both. :func:`decompress` accepts both; :func:`compress` writes xerial framing,
  which Java and librdkafka consumers both read.
* LZ4: the LZ4 *frame* format. Kafka's Java reader decompresses every block on its own, so
  :func:`compress` writes frames with independent blocks.
* ZSTD: standard zstd frames (several concatenated frames are accepted on read).

:class:`SectionBuffer` decompresses many batches' records sections back to back into one buffer
(what the vectorised merge of small batches reads). For LZ4 it skips the frame decoder, whose
set-up costs more than decompressing a half-KiB batch: a frame whose descriptor (FLG, BD and its
checksum byte) the frame decoder has accepted once, with independent blocks and no checksums or
content size, has its blocks decompressed straight into the buffer. Anything else, and any block
that does not decompress, goes through :func:`decompress`.

Every failure on bad input is raised as :class:`~mm2py.protocol.errors.CorruptBatchError` (or
:class:`~mm2py.protocol.errors.UnsupportedError` for an unknown codec id).
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from mm2py.protocol import native
from mm2py.protocol.errors import CorruptBatchError, UnsupportedError

__all__ = ["XERIAL_MAGIC", "Codec", "SectionBuffer", "compress", "decompress"]


class Codec(IntEnum):
    """Compression codec ids of the RecordBatch attributes (bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


#: First 8 bytes of a snappy-java (xerial) stream; followed by int32 version and int32 min version.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_LEN = len(_XERIAL_HEADER)  # 16
# snappy-java's SnappyOutputStream default block size (what the Java producer uses).
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


class CodecCounters:
    """Process-wide counts of codec work, so a mirror can show it did none on its steady path."""

    decompressions: int = 0
    compressions: int = 0

    @classmethod
    def snapshot(cls) -> tuple[int, int]:
        return cls.decompressions, cls.compressions


def _as_codec(codec: int) -> Codec:
    try:
        return Codec(codec)
    except ValueError:
        raise UnsupportedError(f"unknown compression codec id {codec}") from None


def decompress(codec: Codec | int, data: bytes | bytearray | memoryview) -> bytes:
    """Decompress the records section of a batch compressed with ``codec``."""
    c = _as_codec(codec)
    if c is Codec.NONE:
        return bytes(data)
    CodecCounters.decompressions += 1
    try:
        if c is Codec.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if c is Codec.SNAPPY:
            return _snappy_decompress(data)
        if c is Codec.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except CorruptBatchError:
        raise
    except Exception as exc:  # cramjam.DecompressionError, MemoryError, ValueError, ...
        raise CorruptBatchError(f"{c.name} decompression failed: {exc}") from exc


#: LZ4 compression level of :func:`compress` unless given: 0-2 is LZ4's fast mode (what librdkafka
#: writes); 3..12 is its high-compression mode (Kafka's Java producer defaults to 9).
LZ4_DEFAULT_LEVEL = 0


def compress(
    codec: Codec | int, data: bytes | bytearray | memoryview, *, lz4_level: int | None = None
) -> bytes:
    """Compress ``data`` (a serialized records section) in the wire format Kafka expects.

    ``lz4_level``: the LZ4 compression level (default :data:`LZ4_DEFAULT_LEVEL`). LZ4 frames are
    written as Kafka's clients write them (independent 64 KiB blocks, no checksums), which Kafka's
    Java reader requires and which costs its readers no checksum work."""
    c = _as_codec(codec)
    if c is Codec.NONE:
        return bytes(data)
    CodecCounters.compressions += 1
    if c is Codec.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if c is Codec.SNAPPY:
        return _xerial_compress(data)
    if c is Codec.LZ4:
        return _lz4_frame(data, LZ4_DEFAULT_LEVEL if lz4_level is None else lz4_level)
    return bytes(cramjam.zstd.compress(data, level=3))


#: the LZ4 frame header Kafka's clients write (librdkafka and the Java client alike): magic, FLG
#: 0x60 (format version 1, independent blocks, no block or content checksum, no content size:
#: the batch's CRC-32C covers the data), BD 0x40 (blocks of at most 64 KiB) and HC 0x82, the
#: header checksum the LZ4 frame format defines for those two bytes (second byte of their xxHash32)
_KAFKA_LZ4_HEAD = b"\x04\x22\x4d\x18\x60\x40\x82"
_KAFKA_LZ4_BLOCK = 64 * 1024
#: LZ4 block size word: the high bit marks a block stored uncompressed
_LZ4_UNCOMPRESSED = 0x80000000
_UINT32_LE = struct.Struct("<I")


def _lz4_frame(data: bytes | bytearray | memoryview, level: int) -> bytes:
    """``data`` as one LZ4 frame of independent blocks. In LZ4's fast mode (``level`` < 3) it is
    written as Kafka's clients write it; a block that does not shrink is stored as it is. The
    high-compression mode goes through cramjam's frame encoder, whose frames also carry block
    checksums (Kafka's readers verify them)."""
    if level >= 3:
        comp = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        comp.compress(data if type(data) is bytes else bytes(data))  # the streaming API wants bytes
        return bytes(comp.finish())
    compiled = native.lz4_frame(data)
    if compiled is not None:
        return compiled
    mv = memoryview(data).cast("B")
    parts: list[bytes] = [_KAFKA_LZ4_HEAD]
    for start in range(0, len(mv), _KAFKA_LZ4_BLOCK):
        chunk = mv[start : start + _KAFKA_LZ4_BLOCK]
        block = cramjam.lz4.compress_block(chunk, store_size=False)
        if len(block) < len(chunk):
            parts.append(_UINT32_LE.pack(len(block)))
            parts.append(bytes(block))
        else:
            parts.append(_UINT32_LE.pack(len(chunk) | _LZ4_UNCOMPRESSED))
            parts.append(bytes(chunk))
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    mv = memoryview(data).cast("B")
    parts: list[bytes] = [_XERIAL_HEADER]
    for start in range(0, len(mv), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(mv[start : start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | bytearray | memoryview) -> bytes:
    mv = memoryview(data).cast("B")
    if len(mv) < _XERIAL_HEADER_LEN or mv[:8] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(mv))
    out: list[bytes] = []
    pos = _XERIAL_HEADER_LEN
    end = len(mv)
    while pos < end:
        # snappy-java accepts concatenated streams: a fresh header may start a new chunk sequence.
        if end - pos >= _XERIAL_HEADER_LEN and mv[pos : pos + 8] == XERIAL_MAGIC:
            pos += _XERIAL_HEADER_LEN
            continue
        if end - pos < 4:
            raise CorruptBatchError("xerial snappy: truncated chunk length")
        (n,) = _INT32.unpack_from(mv, pos)
        pos += 4
        if n < 0 or n > end - pos:
            raise CorruptBatchError(f"xerial snappy: chunk length {n} exceeds the remaining data")
        out.append(bytes(cramjam.snappy.decompress_raw(mv[pos : pos + n])))
        pos += n
    return b"".join(out)


# ------------------------------------------------------------------------ many sections at once
_LZ4 = int(Codec.LZ4)
#: FLG bits: version (7-6) must be 01; block independence (5); block checksum (4), content size
#: (3), content checksum (2) and dictionary id (0) must be clear for the block fast path.
_LZ4_FLG_FAST = 0x60
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
#: first 7 bytes of frames fit for the fast path (magic, FLG, BD and the descriptor checksum
#: byte HC) that the frame decoder has accepted, and their block size maximum
_lz4_heads: dict[bytes, int] = {}


class SectionBuffer:
    """Uncompressed records sections appended back to back in one growing ``bytearray``.

    :meth:`append` decompresses one batch's records section at the end. The bytes past ``used``
    are scratch space (their content is undefined). ``capacity`` is the expected size of the
    sections; the buffer starts with room for one more LZ4 block of the size Kafka's clients write
    (the block path needs that much free space), so small inputs never make it grow."""

    __slots__ = ("_view", "buf", "used")

    def __init__(self, capacity: int) -> None:
        self.buf = bytearray(capacity + _KAFKA_LZ4_BLOCK)
        self._view = memoryview(self.buf)
        #: bytes of sections written so far
        self.used = 0

    def reserve(self, n: int) -> None:
        """Make room for ``n`` more bytes past ``used``."""
        short = self.used + n - len(self.buf)
        if short > 0:
            self._view.release()
            self.buf.extend(bytes(max(short, len(self.buf))))
            self._view = memoryview(self.buf)

    def close(self) -> bytearray:
        """The buffer, which this object no longer writes to (nor holds a view of)."""
        self._view.release()
        return self.buf

    def append(self, codec: int, data: memoryview) -> int:
        """Decompress ``data`` (a records section compressed with ``codec``) at the end; return its
        uncompressed length. Raises :class:`CorruptBatchError` as :func:`decompress` does."""
        if codec == _LZ4:
            block_max = _lz4_heads.get(bytes(data[:7]))
            if block_max is not None:
                n = self._lz4_blocks(data, block_max)
                if n >= 0:
                    CodecCounters.decompressions += 1
                    self.used += n
                    return n
            section = decompress(codec, data)
            flg, bd = data[4], data[5]  # decoded: the frame has a valid header
            if flg == _LZ4_FLG_FAST and (bd >> 4) & 7 in _LZ4_BLOCK_MAX:
                _lz4_heads[bytes(data[:7])] = _LZ4_BLOCK_MAX[(bd >> 4) & 7]
        else:
            section = decompress(codec, data)
        n = len(section)
        self.reserve(n)
        self._view[self.used : self.used + n] = section
        self.used += n
        return n

    def _lz4_blocks(self, data: memoryview, block_max: int) -> int:
        """Decompress the blocks of a frame with a known-good header at ``used``: the length, or
        -1 when they do not decompress as they should (the frame decoder will say why)."""
        end = len(data) - 4  # the end mark
        pos, n = 7, 0
        try:
            while pos < end:
                (size,) = _UINT32_LE.unpack_from(data, pos)
                pos += 4
                raw = size & _LZ4_UNCOMPRESSED
                size &= ~_LZ4_UNCOMPRESSED
                if size > block_max or pos + size > end:
                    return -1
                at = self.used + n
                if at + block_max > len(self.buf):
                    self.reserve(n + block_max)
                if raw:
                    self._view[at : at + size] = data[pos : pos + size]
                    n += size
                else:
                    n += cramjam.lz4.decompress_block_into(
                        data[pos : pos + size], self._view[at : at + block_max]
                    )
                pos += size
        except Exception:  # cramjam.DecompressionError and the like
            return -1
        if pos != end or data[end:] != b"\x00\x00\x00\x00":
            return -1
        return n
