"""Framing: size prefixes, request/response headers (checked against kio), FrameDecoder,
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
    FrameDecoder,
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


def test_frame_decoder_byte_by_byte_and_bulk() -> None:
    payloads = [b"", b"a", b"hello" * 1000, bytes(range(256))]
    stream = b"".join(encode_frame(p) for p in payloads)
    dec = FrameDecoder()
    got: list[bytes] = []
    for i in range(len(stream)):
        got.extend(dec.feed(stream[i : i + 1]))
    assert got == payloads
    dec.feed_eof()
    assert FrameDecoder().feed(stream) == payloads


@settings(max_examples=200)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=10),
)
def test_frame_decoder_any_chunking(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    dec = FrameDecoder()
    got: list[bytes] = []
    for a, b in itertools.pairwise(points):
        got.extend(dec.feed(stream[a:b]))
    assert got == payloads
    assert dec.buffered == 0


def test_frame_decoder_rejects_negative_and_huge() -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">i", -5))
    with pytest.raises(FrameTooLargeError):
        FrameDecoder(max_frame_size=1000).feed(struct.pack(">i", 1001))
    assert FrameDecoder(max_frame_size=1000).feed(struct.pack(">i", 3) + b"abc") == [b"abc"]


def test_frame_decoder_eof_inside_frame() -> None:
    dec = FrameDecoder()
    assert dec.feed(struct.pack(">i", 10) + b"abc") == []
    with pytest.raises(TruncatedError):
        dec.feed_eof()
    dec2 = FrameDecoder()
    dec2.feed(b"\x00\x00")
    with pytest.raises(TruncatedError):
        dec2.feed_eof()


@settings(max_examples=300)
@given(data=st.binary(max_size=64))
def test_frame_decoder_random_bytes_only_protocol_errors(data: bytes) -> None:
    dec = FrameDecoder(max_frame_size=1 << 20)
    try:
        dec.feed(data)
        dec.feed_eof()
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
