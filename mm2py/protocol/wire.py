"""Kafka wire primitives: a bounds-checked reader and a part-collecting writer.

Pure and sans-IO. The reader never lets ``struct.error``/``IndexError``/``UnicodeDecodeError``
escape: every malformed input surfaces as :class:`TruncatedError` or :class:`ProtocolError`.
Array lengths are checked against the bytes left *before* anything is allocated, so hostile
lengths cannot trigger huge allocations.

``bytes``/``records`` fields are returned as zero-copy ``memoryview`` slices of the input buffer.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from uuid import UUID

from mm2py.protocol.errors import ProtocolError, TruncatedError

Buf = bytes | bytearray | memoryview

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")

ZERO_UUID = uuid.UUID(int=0)


#: topic ids read, by their 16 bytes: ``uuid.UUID(bytes=...)`` costs ~1 µs and every Fetch and
#: Produce response names each of its topics by id (UUIDs are immutable, so one object serves all)
_UUIDS: dict[bytes, uuid.UUID] = {}
_UUIDS_KEPT = 100_000


class Reader:
    """Sequential big-endian reader over a buffer with strict bounds checks."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: Buf, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf if isinstance(buf, memoryview) else memoryview(buf)
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise TruncatedError(f"need {n} bytes at {p}, only {self.end - p} left")
        self.pos = p + n
        return p

    def int8(self) -> int:
        return int(_I8.unpack_from(self.buf, self._take(1))[0])

    def boolean(self) -> bool:
        return self.int8() != 0

    def int16(self) -> int:
        return int(_I16.unpack_from(self.buf, self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self.buf, self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack_from(self.buf, self._take(8))[0])

    def uvarint(self) -> int:
        shift = 0
        value = 0
        while True:
            if self.pos >= self.end:
                raise TruncatedError("truncated varint")
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ProtocolError("unsigned varint longer than 5 bytes")

    def uuid(self) -> uuid.UUID:
        p = self._take(16)
        raw = bytes(self.buf[p : p + 16])
        known = _UUIDS.get(raw)
        if known is None:  # a topic id: the same few come back in every response
            if len(_UUIDS) >= _UUIDS_KEPT:
                _UUIDS.clear()
            known = _UUIDS[raw] = uuid.UUID(bytes=raw)
        return known

    def _length(self, flexible: bool, nullable: bool, what: str) -> int:
        """Length prefix of a string/bytes field; -1 means null."""
        n = self.uvarint() - 1 if flexible else self.int16() if what == "string" else self.int32()
        if n < -1:
            raise ProtocolError(f"negative {what} length {n}")
        if n == -1 and not nullable:
            raise ProtocolError(f"null {what} where not nullable")
        return n

    def topic_ref(self, by_id: bool, flexible: bool) -> tuple[str | None, UUID | None]:
        """A response's topic: its id (v13+ of Fetch/Produce; all-zero means none) or its name."""
        if by_id:
            topic_id = self.uuid()
            return None, (None if topic_id.int == 0 else topic_id)
        return self.string(flexible), None

    def string(self, flexible: bool) -> str:
        s = self.nullable_string(flexible, _nullable=False)
        assert s is not None
        return s

    def nullable_string(self, flexible: bool, _nullable: bool = True) -> str | None:
        n = self._length(flexible, _nullable, "string")
        if n == -1:
            return None
        p = self._take(n)
        try:
            return str(self.buf[p : p + n], "utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"invalid UTF-8 in string: {e}") from None

    def nullable_bytes(self, flexible: bool) -> memoryview | None:
        n = self._length(flexible, True, "bytes")
        if n == -1:
            return None
        p = self._take(n)
        return self.buf[p : p + n]

    def array_len(self, flexible: bool, min_item_size: int = 1) -> int:
        """Element count of an array (null arrays read as 0). Checked against bytes left."""
        n = self.uvarint() - 1 if flexible else self.int32()
        if n < -1:
            raise ProtocolError(f"negative array length {n}")
        if n == -1:
            return 0
        if n * min_item_size > self.remaining:
            raise TruncatedError(f"array of {n} items cannot fit in {self.remaining} bytes")
        return n

    def nullable_array_len(self, flexible: bool, min_item_size: int = 1) -> int | None:
        """Like :meth:`array_len` but returns ``None`` for a null array."""
        save = self.pos
        n = self.uvarint() - 1 if flexible else self.int32()
        if n == -1:
            return None
        self.pos = save
        return self.array_len(flexible, min_item_size)

    def int32_array(self, flexible: bool) -> list[int]:
        n = self.array_len(flexible, 4)
        p = self._take(4 * n)
        return list(struct.unpack_from(f">{n}i", self.buf, p))

    def tagged_fields(self) -> dict[int, memoryview]:
        """Read a tagged-field section; returns {tag: raw value bytes}."""
        count = self.uvarint()
        if count > self.remaining:
            raise TruncatedError("tagged field count exceeds buffer")
        out: dict[int, memoryview] = {}
        for _ in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            p = self._take(size)
            out[tag] = self.buf[p : p + size]
        return out

    def skip_tagged_fields(self, flexible: bool) -> None:
        if flexible:
            self.tagged_fields()

    def expect_end(self) -> None:
        """Trailing bytes after a message are tolerated (newer brokers may add fields)."""


class Writer:
    """Collects encoded parts; :meth:`getvalue` joins them once."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[Buf] = []

    def raw(self, data: Buf) -> None:
        self.parts.append(data)

    def int8(self, v: int) -> None:
        self.parts.append(_I8.pack(v))

    def boolean(self, v: bool) -> None:
        self.parts.append(b"\x01" if v else b"\x00")

    def int16(self, v: int) -> None:
        self.parts.append(_I16.pack(v))

    def int32(self, v: int) -> None:
        self.parts.append(_I32.pack(v))

    def int64(self, v: int) -> None:
        self.parts.append(_I64.pack(v))

    def uvarint(self, v: int) -> None:
        self.parts.append(encode_uvarint(v))

    def uuid(self, v: uuid.UUID | None) -> None:
        self.parts.append((v or ZERO_UUID).bytes)

    def nullable_string(self, v: str | None, flexible: bool) -> None:
        if v is None:
            self.parts.append(b"\x00" if flexible else b"\xff\xff")
            return
        data = v.encode("utf-8")
        if flexible:
            self.uvarint(len(data) + 1)
        else:
            if len(data) > 0x7FFF:
                raise ValueError("string too long")
            self.int16(len(data))
        self.parts.append(data)

    def string(self, v: str, flexible: bool) -> None:
        self.nullable_string(v, flexible)

    def nullable_bytes(self, v: Buf | None, flexible: bool) -> None:
        if v is None:
            self.parts.append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            return
        n = v.nbytes if isinstance(v, memoryview) else len(v)
        if flexible:
            self.uvarint(n + 1)
        else:
            self.int32(n)
        self.parts.append(v)

    def array_len(self, n: int | None, flexible: bool) -> None:
        if flexible:
            self.uvarint(0 if n is None else n + 1)
        else:
            self.int32(-1 if n is None else n)

    def int32_array(self, values: Iterable[int], flexible: bool) -> None:
        vals = list(values)
        self.array_len(len(vals), flexible)
        self.parts.append(struct.pack(f">{len(vals)}i", *vals))

    def tagged_fields(self, fields: dict[int, bytes] | None = None) -> None:
        if not fields:
            self.parts.append(b"\x00")
            return
        self.uvarint(len(fields))
        for tag in sorted(fields):
            self.uvarint(tag)
            self.uvarint(len(fields[tag]))
            self.parts.append(fields[tag])

    def empty_tags(self, flexible: bool) -> None:
        if flexible:
            self.parts.append(b"\x00")

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


def encode_uvarint(v: int) -> bytes:
    if v < 0:
        raise ValueError("unsigned varint must be >= 0")
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_F = TypeVar("_F", bound=Callable[..., Any])


def protocol_guard(func: _F) -> _F:
    """Decorator for top-level decoders: any stray parsing exception becomes a ProtocolError."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ProtocolError:
            raise
        except (struct.error, IndexError, ValueError, OverflowError, UnicodeError) as e:
            raise ProtocolError(f"{func.__name__}: malformed input: {e!r}") from e

    return wrapper  # type: ignore[return-value]
