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

Every failure on bad input is raised as :class:`~mm2py.protocol.errors.CorruptBatchError` (or
:class:`~mm2py.protocol.errors.UnsupportedError` for an unknown codec id).
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from mm2py.protocol.errors import CorruptBatchError, UnsupportedError

__all__ = ["XERIAL_MAGIC", "Codec", "compress", "decompress"]


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


def compress(codec: Codec | int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress ``data`` (a serialized records section) in the wire format Kafka expects."""
    c = _as_codec(codec)
    if c is Codec.NONE:
        return bytes(data)
    CodecCounters.compressions += 1
    if c is Codec.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if c is Codec.SNAPPY:
        return _xerial_compress(data)
    if c is Codec.LZ4:
        comp = cramjam.lz4.Compressor(block_linked=False)
        comp.compress(data if type(data) is bytes else bytes(data))  # the streaming API wants bytes
        return bytes(comp.finish())
    return bytes(cramjam.zstd.compress(data, level=3))


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
