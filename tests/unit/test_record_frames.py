"""The vectorised record framing (record_frames) and the LZ4 block fast path (SectionBuffer) against
one-record-at-a-time references: the same fields, the same re-encoded bytes, the same verdict on
malformed input."""

from __future__ import annotations

import itertools
import struct

import cramjam
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mm2py.protocol.compression import Codec, CodecCounters, SectionBuffer, compress, decompress
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.record_codec import Record, encode_record, read_varint, read_varlong
from mm2py.protocol.record_frames import PAD, reframe, scan
from tests.support.hypothesis_examples import examples

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path

Frame = tuple[int, int, int, int, int, int]  # start, tail, end, attributes, ts delta, offset delta


def reference_frames(section: bytes, count: int) -> list[Frame]:
    """The framing read record by record, with the checks the module docstring lists."""
    out: list[Frame] = []
    pos = 0
    try:
        for _ in range(count):
            length, p = read_varint(section, pos)
            end = p + length
            if length < 1 or end > len(section):
                raise CorruptBatchError("length")
            attrs = section[p]
            ts, p = read_varlong(section, p + 1)
            off, p = read_varint(section, p)
            if p > end:
                raise CorruptBatchError("header")
            out.append((pos, p, end, attrs, ts, off))
            pos = end
    except IndexError:
        raise CorruptBatchError("truncated") from None
    if pos != len(section):
        raise CorruptBatchError("remain")
    return out


def pack(sections: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    starts, at = [], 0
    for s in sections:
        starts.append(at)
        at += len(s)
    buf = np.frombuffer(b"".join(sections) + bytes(PAD), dtype=np.uint8)
    return buf, np.array(starts, dtype=np.int64), np.array([*starts[1:], at], dtype=np.int64)


record_st = st.builds(
    Record,
    offset_delta=st.integers(0, 3),
    timestamp_delta=st.one_of(st.integers(-100, 100), st.integers(-(2**62), 2**62)),
    key=st.one_of(st.none(), st.binary(max_size=20)),
    value=st.one_of(st.none(), st.binary(max_size=300)),
    headers=st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))),
                     max_size=2).map(tuple),
    attributes=st.integers(0, 127),
)
batches_st = st.lists(st.lists(record_st, min_size=0, max_size=6), min_size=1, max_size=8)


#: ``scalar_up_to`` values: every input through the numpy arrays, every input record by record
PATHS = pytest.mark.parametrize("scalar", [0, 10**9], ids=["arrays", "records"])


@PATHS
@settings(max_examples=examples(150), deadline=None)
@given(batches=batches_st, data=st.data())
def test_scan_and_reframe_match_record_by_record_encoding(
    scalar: int, batches: list[list[Record]], data: st.DataObject
) -> None:
    sections = [b"".join(encode_record(r) for r in recs) for recs in batches]
    counts = np.array([len(r) for r in batches], dtype=np.int64)
    buf, starts, ends = pack(sections)
    f = scan(buf, starts, ends, counts, str, scalar_up_to=scalar)
    rows = 0
    for b, (section, recs) in enumerate(zip(sections, batches, strict=True)):
        for k, (start, tail, end, attrs, ts, off) in enumerate(reference_frames(section, len(recs))):
            r = f.first[b] + k
            got = (f.start[r] - starts[b], f.tail[r] - starts[b], f.end[r] - starts[b], f.attributes[r],
                   f.timestamp_delta[r], f.offset_delta[r])
            assert tuple(int(x) for x in got) == (start, tail, end, attrs, ts, off)
            rows += 1
        assert f.in_sequence[b] == all(r.offset_delta == i for i, r in enumerate(recs))
    assert rows == len(f.start)
    # groups of consecutive batches, each batch with its own shifts
    cut = sorted(data.draw(st.sets(st.integers(1, len(batches) - 1), max_size=3))) if len(batches) > 1 else []
    bounds = [0, *cut, len(batches)]
    groups = [(i, j) for i, j in itertools.pairwise(bounds) if j - i >= 1]
    ts_shift = data.draw(st.lists(st.integers(-1000, 1000), min_size=len(batches), max_size=len(batches)))
    off_shift = data.draw(st.lists(st.integers(0, 10_000), min_size=len(batches), max_size=len(batches)))
    out = reframe(f, groups, ts_shift, off_shift, scalar_up_to=scalar)
    for (i, j), section in zip(groups, out, strict=True):
        want = b"".join(
            encode_record(Record(r.offset_delta + off_shift[b], r.timestamp_delta + ts_shift[b],
                                 r.key, r.value, r.headers, r.attributes))
            for b in range(i, j) for r in batches[b]
        )
        assert section == want


@PATHS
@settings(max_examples=examples(400), deadline=None)
@given(sections=st.lists(st.binary(max_size=40), min_size=1, max_size=4),
       counts=st.lists(st.integers(0, 4), min_size=4, max_size=4))
def test_malformed_sections_get_the_verdict_of_the_record_by_record_reader(
    scalar: int, sections: list[bytes], counts: list[int]
) -> None:
    want: list[list[Frame] | None] = []
    for s, n in zip(sections, counts, strict=False):
        try:
            want.append(reference_frames(s, n))
        except CorruptBatchError:
            want.append(None)
    buf, starts, ends = pack(sections)
    n_arr = np.array(counts[: len(sections)], dtype=np.int64)
    if any(w is None for w in want):
        first_bad = next(i for i, w in enumerate(want) if w is None)
        with pytest.raises(CorruptBatchError, match=f"^batch {first_bad}: "):
            scan(buf, starts, ends, n_arr, lambda i: f"batch {i}", scalar_up_to=scalar)
        return
    f = scan(buf, starts, ends, n_arr, str, scalar_up_to=scalar)
    for b, frames in enumerate(want):
        assert frames is not None
        for k, frame in enumerate(frames):
            r = f.first[b] + k
            assert int(f.end[r] - starts[b]) == frame[2] and int(f.offset_delta[r]) == frame[5]


# ------------------------------------------------------------------------- LZ4 block fast path
#: an LZ4 frame header as librdkafka and Kafka's Java client write it: magic, FLG 0x60 (version 1,
#: independent blocks, no checksums, no content size), BD 0x40 (64 KiB blocks) and the header
#: checksum byte the LZ4 frame format derives from those two bytes
KAFKA_LZ4_HEAD = bytes.fromhex("04224d18604082")


def kafka_lz4_frame(data: bytes, *, raw: bool = False) -> bytes:
    parts = [KAFKA_LZ4_HEAD]
    for i in range(0, len(data), 65536):
        chunk = data[i : i + 65536]
        block = chunk if raw else bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        parts.append(struct.pack("<I", len(block) | (0x80000000 if raw else 0)))
        parts.append(block)
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("size", [0, 1, 300, 65536, 200_000])
def test_lz4_frames_decompress_block_by_block_to_what_the_frame_decoder_reads(size: int, raw: bool) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    frame = kafka_lz4_frame(data, raw=raw)
    assert decompress(Codec.LZ4, frame) == data  # a well-formed frame
    sections = SectionBuffer(16)
    for _ in range(3):  # the first through the frame decoder, then the fast path
        sections.append(Codec.LZ4, memoryview(frame))
    assert bytes(sections.buf[: sections.used]) == data * 3


def test_a_frame_with_checksums_still_goes_through_the_frame_decoder() -> None:
    data = b"some records " * 500
    frame = bytes(cramjam.lz4.compress(data))  # cramjam's frame encoder writes checksums
    assert frame[4] & 0x14  # block or content checksum flag
    sections = SectionBuffer(16)
    before = CodecCounters.decompressions
    sections.append(Codec.LZ4, memoryview(frame))
    sections.append(Codec.LZ4, memoryview(frame))
    assert bytes(sections.buf[: sections.used]) == data * 2
    assert CodecCounters.decompressions - before == 2


@pytest.mark.parametrize("damage", ["block", "size", "end mark", "truncated"])
def test_a_damaged_frame_is_refused_and_nothing_is_appended(damage: str) -> None:
    good = kafka_lz4_frame(b"abcdefgh" * 2000)
    sections = SectionBuffer(16)
    sections.append(Codec.LZ4, memoryview(good))  # the header is known from here on
    used = sections.used
    frame = bytearray(good)
    if damage == "block":
        frame[12:40] = b"\xff" * 28
    elif damage == "size":
        frame[7:11] = struct.pack("<I", 70_000)
    elif damage == "end mark":
        frame[-1] = 1
    else:
        frame = frame[:-10]
    with pytest.raises(CorruptBatchError):
        sections.append(Codec.LZ4, memoryview(bytes(frame)))
    assert sections.used == used


@pytest.mark.parametrize("level", [0, 9])
@pytest.mark.parametrize("size", [0, 100, 65536, 200_000])
def test_lz4_levels_write_frames_that_hold_the_same_records(level: int, size: int) -> None:
    text = b"".join(b"record %d " % i for i in range(30000))[:size]
    noise = bytes((i * 7919 + i // 3) % 256 for i in range(size))
    for data in (text, noise):
        out = compress(Codec.LZ4, data, lz4_level=level)
        assert decompress(Codec.LZ4, out) == data  # cramjam's frame decoder checks the header
    if size > 1000:
        assert len(compress(Codec.LZ4, text, lz4_level=level)) < len(text) // 2


def test_fast_lz4_frames_are_written_as_kafka_clients_write_them() -> None:
    out = compress(Codec.LZ4, b"abc" * 50_000, lz4_level=0)
    assert out[:7] == KAFKA_LZ4_HEAD and out[-4:] == b"\x00\x00\x00\x00"
