"""Framing: size prefixes, request/response headers (checked against kio), FrameReader,
RequestTracker."""

from __future__ import annotations

import itertools
import random
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as KioHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioHeaderV2
from kio.serial import entity_reader

from mm2py.protocol.errors import ProtocolError, TruncatedError
from mm2py.protocol.framing import (
    FrameReader,
    FrameTooLargeError,
    RequestTracker,
    decode_request_header,
    decode_response_header,
    encode_frame,
    encode_request_header,
    encode_response_header,
    frame_request,
    request_header_version,
    response_header_version,
)
from tests.support.hypothesis_examples import examples


@pytest.mark.parametrize(
    ("api_key", "version", "header_version"),
    [(0, 3, 1), (0, 8, 1), (0, 9, 2), (1, 11, 1), (1, 12, 2), (3, 8, 1), (3, 9, 2), (18, 2, 1),
     (18, 3, 2), (2, 5, 1), (2, 6, 2), (22, 1, 1), (22, 2, 2)],
)  # fmt: skip
def test_request_header_matches_kio(api_key: int, version: int, header_version: int) -> None:
    assert request_header_version(api_key, version) == header_version
    raw = encode_request_header(api_key, version, 123456, "mm2py-client")
    kio_cls = KioHeaderV2 if header_version == 2 else KioHeaderV1
    header: Any
    header, size = entity_reader(kio_cls)(raw, 0)
    assert size == len(raw)
    assert (header.request_api_key, header.request_api_version) == (api_key, version)
    assert header.correlation_id == 123456
    assert header.client_id == "mm2py-client"
    ours, offset = decode_request_header(raw)
    assert offset == len(raw)
    assert (ours.api_key, ours.api_version, ours.correlation_id, ours.client_id) == (
        api_key,
        version,
        123456,
        "mm2py-client",
    )


def test_null_client_id() -> None:
    raw = encode_request_header(3, 12, 7, None)
    header: Any
    header, _ = entity_reader(KioHeaderV2)(raw, 0)
    assert header.client_id is None


def test_response_header_versions() -> None:
    # ApiVersions always answers with header v0, even when flexible.
    assert response_header_version(18, 3) == 0
    assert response_header_version(1, 12) == 1
    assert response_header_version(1, 11) == 0
    for hv in (0, 1):
        raw = encode_response_header(42, hv) + b"body"
        cid, off = decode_response_header(raw, hv)
        assert cid == 42
        assert raw[off:] == b"body"


def test_frame_request_parts() -> None:
    body = b"x" * 10
    parts = frame_request(1, 4, 9, "c", body)
    wire = b"".join(parts)
    (size,) = struct.unpack(">i", wire[:4])
    assert size == len(wire) - 4
    assert wire.endswith(body)
    assert parts[1] is body  # body not copied


def test_frame_reader_byte_by_byte_and_bulk() -> None:
    payloads = [b"", b"a", b"hello" * 1000, bytes(range(256))]
    stream = b"".join(encode_frame(p) for p in payloads)
    reader = FrameReader(scratch_size=1024)
    got: list[bytes | bytearray] = []
    for i in range(len(stream)):
        got.extend(reader.feed(stream[i : i + 1]))
    assert got == payloads
    reader.eof()
    assert FrameReader().feed(stream) == payloads


def _receive(reader: FrameReader, stream: bytes, chunks: list[int]) -> list[bytes | bytearray]:
    """What a socket does with a BufferedProtocol: write up to ``len(buffer())`` bytes (each
    time the next chunk size, cycling) into ``buffer()``, then call ``filled``."""
    got: list[bytes | bytearray] = []
    pos = 0
    for chunk in itertools.cycle(chunks or [1 << 20]):
        if pos == len(stream):
            return got
        buf = reader.buffer()
        assert len(buf) > 0
        n = min(len(buf), chunk, len(stream) - pos)
        buf[:n] = stream[pos : pos + n]
        pos += n
        got.extend(reader.filled(n))
    raise AssertionError("unreachable")


@settings(max_examples=examples(300))
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    chunks=st.lists(st.integers(min_value=1, max_value=700), max_size=6),
    scratch=st.integers(min_value=8, max_value=400),
)
def test_frame_reader_any_chunking_and_scratch_size(
    payloads: list[bytes], chunks: list[int], scratch: int
) -> None:
    reader = FrameReader(scratch_size=scratch)
    assert _receive(reader, b"".join(encode_frame(p) for p in payloads), chunks) == payloads
    assert reader.buffered == 0
    reader.eof()


def test_a_frame_larger_than_the_scratch_is_received_in_place() -> None:
    big, small = bytes(range(256)) * 40, b"next"
    reader = FrameReader(scratch_size=64)
    stream = encode_frame(big) + encode_frame(small)
    first = reader.buffer()
    first[:20] = stream[:20]  # the size prefix and 16 bytes of the frame
    assert reader.filled(20) == []
    rest = reader.buffer()
    assert len(rest) == len(big) - 16  # the socket can write the rest of this frame, no further
    rest[:] = stream[20 : 4 + len(big)]
    (frame,) = reader.filled(len(rest))
    assert frame == big and isinstance(frame, bytearray)
    rest.release()
    assert _receive(reader, stream[4 + len(big) :], [3]) == [small]


def test_frame_reader_rejects_negative_and_huge() -> None:
    with pytest.raises(ProtocolError):
        FrameReader().feed(struct.pack(">i", -5))
    with pytest.raises(FrameTooLargeError):
        FrameReader(max_frame_size=1000).feed(struct.pack(">i", 1001))
    assert FrameReader(max_frame_size=1000).feed(struct.pack(">i", 3) + b"abc") == [b"abc"]


def test_frame_reader_eof_inside_frame() -> None:
    reader = FrameReader()
    assert reader.feed(struct.pack(">i", 10) + b"abc") == []
    with pytest.raises(TruncatedError):
        reader.eof()
    partial_size = FrameReader()
    partial_size.feed(b"\x00\x00")
    with pytest.raises(TruncatedError):
        partial_size.eof()
    large = FrameReader(scratch_size=16)
    large.feed(struct.pack(">i", 1000) + b"x" * 100)
    with pytest.raises(TruncatedError):
        large.eof()


@settings(max_examples=examples(300))
@given(data=st.binary(max_size=64))
def test_frame_reader_random_bytes_only_protocol_errors(data: bytes) -> None:
    reader = FrameReader(max_frame_size=1 << 20, scratch_size=16)
    try:
        reader.feed(data)
        reader.eof()
    except ProtocolError:
        pass


def test_tracker_matches_in_any_order() -> None:
    tr: RequestTracker[str] = RequestTracker()
    a = tr.register(1, 12, None, "a")  # flexible fetch: response header v1
    b = tr.register(3, 8, None, "b")  # non-flexible metadata: header v0
    assert a.correlation_id != b.correlation_id
    assert len(tr) == 2
    frame_b = encode_response_header(b.correlation_id, 0) + b"BODY-B"
    res = tr.match(frame_b)
    assert res is not None
    pending, body = res
    assert pending.context == "b"
    assert bytes(body) == b"BODY-B"
    frame_a = encode_response_header(a.correlation_id, 1) + b"BODY-A"
    res = tr.match(frame_a)
    assert res is not None
    assert res[0].context == "a"
    assert bytes(res[1]) == b"BODY-A"
    assert len(tr) == 0
    with pytest.raises(ProtocolError):
        tr.match(frame_a)  # already answered


def test_tracker_abandon_and_drain() -> None:
    tr: RequestTracker[int] = RequestTracker()
    a = tr.register(1, 4, None, 1)
    tr.register(1, 4, None, 2)
    assert tr.abandon(a.correlation_id) is not None
    assert tr.match(encode_response_header(a.correlation_id, 0)) is None  # late answer ignored
    drained = tr.drain()
    assert [p.context for p in drained] == [2]
    assert len(tr) == 0


def test_tracker_wraps_correlation_ids() -> None:
    tr: RequestTracker[None] = RequestTracker(first_id=0x7FFFFFFF)
    first = tr.register(1, 4, None)
    second = tr.register(1, 4, None)
    assert first.correlation_id == 0x7FFFFFFF
    assert second.correlation_id == 0
    rnd = random.Random(1)
    ids = {tr.register(1, 4, None).correlation_id for _ in range(rnd.randint(5, 50))}
    assert all(0 <= i <= 0x7FFFFFFF for i in ids)
