"""Kafka request/response framing (sans-IO).

Every Kafka message on the wire is ``int32 size`` followed by ``size`` bytes. A request is a
request header (v1: api_key, api_version, correlation_id, client_id; v2 adds a tagged-field section)
plus the body; a response is a response header (v0: correlation_id; v1 adds tagged fields) plus
the body. ApiVersions responses always use response header v0 (so clients can parse them before
negotiation).

:class:`FrameReader` turns a byte stream into complete frames, the socket writing into buffers it
hands out (large frames land in place, uncopied); :class:`RequestTracker` does the correlation-id
bookkeeping. Neither touches sockets.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from mm2py.protocol.errors import ProtocolError, TruncatedError, UnsupportedError
from mm2py.protocol.wire import Buf, Reader, Writer

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024
_SIZE = struct.Struct(">i")


class FrameTooLargeError(ProtocolError):
    """A frame announces a size above the configured maximum."""


# First flexible (KIP-482) version of each API we speak. Flexible requests use request header v2,
# flexible responses use response header v1 (except ApiVersions, always v0).
FLEXIBLE_SINCE: dict[int, int] = {
    0: 9,  # Produce
    1: 12,  # Fetch
    2: 6,  # ListOffsets
    3: 9,  # Metadata
    17: 1 << 15,  # SaslHandshake: never flexible
    18: 3,  # ApiVersions
    22: 2,  # InitProducerId
    36: 2,  # SaslAuthenticate
}
API_VERSIONS_KEY = 18


def is_flexible(api_key: int, api_version: int) -> bool:
    try:
        return api_version >= FLEXIBLE_SINCE[api_key]
    except KeyError:
        raise UnsupportedError(f"unknown api key {api_key}") from None


def request_header_version(api_key: int, api_version: int) -> int:
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """Request header v1 or v2 (picked from the API's flexible versions)."""
    w = Writer()
    w.int16(api_key)
    w.int16(api_version)
    w.int32(correlation_id)
    # client_id is a legacy (int16-length) nullable string even in header v2.
    w.nullable_string(client_id, flexible=False)
    if request_header_version(api_key, api_version) == 2:
        w.tagged_fields()
    return w.getvalue()


def frame_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Buf
) -> list[Buf]:
    """Size prefix + header as one part, the body as a second (no copy of the body)."""
    header = encode_request_header(api_key, api_version, correlation_id, client_id)
    body_len = body.nbytes if isinstance(body, memoryview) else len(body)
    return [_SIZE.pack(len(header) + body_len) + header, body]


def encode_frame(payload: Buf) -> bytes:
    n = payload.nbytes if isinstance(payload, memoryview) else len(payload)
    return _SIZE.pack(n) + bytes(payload)


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def decode_request_header(frame: Buf) -> tuple[RequestHeader, int]:
    """Parse a request header (for tests and fakes). Returns (header, body offset)."""
    r = Reader(frame)
    api_key = r.int16()
    api_version = r.int16()
    correlation_id = r.int32()
    client_id = r.nullable_string(flexible=False)
    if request_header_version(api_key, api_version) == 2:
        r.tagged_fields()
    return RequestHeader(api_key, api_version, correlation_id, client_id), r.pos


def decode_response_header(frame: Buf, header_version: int) -> tuple[int, int]:
    """Returns (correlation_id, body offset)."""
    r = Reader(frame)
    correlation_id = r.int32()
    if header_version >= 1:
        r.tagged_fields()
    return correlation_id, r.pos


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    return _SIZE.pack(correlation_id) + (b"\x00" if header_version >= 1 else b"")


class FrameReader:
    """Splits a size-prefixed byte stream into frames, the bytes written by the socket straight
    into buffers it hands out (for ``asyncio.BufferedProtocol``: ``get_buffer`` is :meth:`buffer`,
    ``buffer_updated`` is :meth:`filled`).

    Frames that fit its scratch buffer are cut out of it (one copy each). A frame that does not
    (a fetch response, megabytes) gets a ``bytearray`` of its own size as soon as its size prefix
    is in, and the socket fills the rest of it directly: no copy, no growing buffer. Frames are
    returned as ``bytes`` or ``bytearray``; nothing writes to them afterwards.
    """

    __slots__ = ("_end", "_frame", "_got", "_max", "_scratch", "_start", "_view")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, scratch_size: int = 64 * 1024) -> None:
        if scratch_size < 8:
            raise ValueError(f"scratch_size {scratch_size} too small")
        self._max = max_frame_size
        self._scratch = bytearray(scratch_size)  # never resized: _view stays valid
        self._view = memoryview(self._scratch)
        self._start = 0  # first byte not yet taken from the scratch
        self._end = 0  # end of the bytes received into the scratch
        self._frame: bytearray | None = None  # a large frame being filled in place
        self._got = 0  # bytes of _frame received

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as a frame."""
        return self._got if self._frame is not None else self._end - self._start

    def buffer(self) -> memoryview:
        """Where the next received bytes go (never empty)."""
        if self._frame is not None:
            return memoryview(self._frame)[self._got :]
        if self._end == len(self._scratch):  # full: move the incomplete frame to the front
            n = self._end - self._start
            self._view[:n] = self._scratch[self._start : self._end]
            self._start, self._end = 0, n
        return self._view[self._end :]

    def filled(self, nbytes: int) -> list[bytes | bytearray]:
        """``nbytes`` were written at the start of the last :meth:`buffer`; returns the frames
        they complete (without their size prefix). Raises ``ProtocolError`` for a negative or too
        large size (the stream cannot be read on after that)."""
        frame = self._frame
        if frame is not None:
            self._got += nbytes
            if self._got < len(frame):
                return []
            self._frame = None
            return [frame]
        self._end += nbytes
        scratch, view, pos, end = self._scratch, self._view, self._start, self._end
        frames: list[bytes | bytearray] = []
        while end - pos >= 4:
            size = _SIZE.unpack_from(scratch, pos)[0]
            if size < 0:
                raise ProtocolError(f"negative frame size {size}")
            if size > self._max:
                raise FrameTooLargeError(f"frame size {size} exceeds maximum {self._max}")
            if end - pos - 4 >= size:
                frames.append(bytes(view[pos + 4 : pos + 4 + size]))
                pos += 4 + size
                continue
            if size + 4 > len(scratch):  # larger than the scratch: its own buffer from here on
                big = bytearray(size)
                got = end - pos - 4
                big[:got] = view[pos + 4 : end]
                self._frame, self._got = big, got
                pos = end
            break
        if pos == end:
            pos = end = 0
        self._start, self._end = pos, end
        return frames

    def feed(self, data: Buf) -> list[bytes | bytearray]:
        """Push-style use (a stream that hands out bytes objects): ``data`` copied in through
        :meth:`buffer` and :meth:`filled`; returns the frames it completes."""
        src = memoryview(data).cast("B")
        frames: list[bytes | bytearray] = []
        while src:
            buf = self.buffer()
            n = min(len(buf), len(src))
            buf[:n] = src[:n]
            src = src[n:]
            frames.extend(self.filled(n))
        return frames

    def eof(self) -> None:
        """The stream ended; raises ``TruncatedError`` if it ended inside a frame."""
        if self.buffered:
            raise TruncatedError(f"stream ended inside a frame ({self.buffered} bytes of it received)")


ResponseParser = Callable[[memoryview, int], Any]
C = TypeVar("C")


@dataclass(slots=True)
class PendingRequest(Generic[C]):
    correlation_id: int
    api_key: int
    api_version: int
    parser: ResponseParser | None
    context: C | None = None

    @property
    def response_header_version(self) -> int:
        return response_header_version(self.api_key, self.api_version)


class RequestTracker(Generic[C]):
    """Correlation-id allocation and matching of responses to pending requests.

    Kafka answers requests of one connection in order; an out-of-order or unknown correlation id is
    a protocol violation.
    """

    __slots__ = ("_abandoned", "_next", "_pending")

    def __init__(self, first_id: int = 0) -> None:
        self._next = first_id
        self._pending: dict[int, PendingRequest[C]] = {}
        self._abandoned: set[int] = set()

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, correlation_id: object) -> bool:
        return correlation_id in self._pending

    def __iter__(self) -> Iterator[PendingRequest[C]]:
        return iter(list(self._pending.values()))

    def register(
        self,
        api_key: int,
        api_version: int,
        parser: ResponseParser | None,
        context: C | None = None,
    ) -> PendingRequest[C]:
        cid = self._next
        self._next = 0 if cid >= 0x7FFFFFFF else cid + 1
        self._abandoned.discard(cid)
        if cid in self._pending:
            raise ProtocolError(f"correlation id {cid} still in flight")
        pending = PendingRequest(cid, api_key, api_version, parser, context)
        self._pending[cid] = pending
        return pending

    def abandon(self, correlation_id: int) -> PendingRequest[C] | None:
        """Forget a request (e.g. it timed out); a late response for it will be ignored."""
        pending = self._pending.pop(correlation_id, None)
        if pending is not None:
            self._abandoned.add(correlation_id)
        return pending

    def pop(self, correlation_id: int) -> PendingRequest[C]:
        try:
            return self._pending.pop(correlation_id)
        except KeyError:
            raise ProtocolError(f"response for unknown correlation id {correlation_id}") from None

    def match(self, frame: Buf) -> tuple[PendingRequest[C], memoryview] | None:
        """Find the pending request of a response frame; returns it and the body view.

        Returns ``None`` for the late response of an abandoned request.
        """
        cid = Reader(frame).int32()
        if cid in self._abandoned:
            self._abandoned.discard(cid)
            return None
        pending = self.pop(cid)
        _, offset = decode_response_header(frame, pending.response_header_version)
        return pending, memoryview(frame)[offset:]

    def drain(self) -> list[PendingRequest[C]]:
        """Remove and return every pending request (connection lost)."""
        out = list(self._pending.values())
        self._pending.clear()
        self._abandoned.clear()
        return out
