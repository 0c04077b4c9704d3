"""RecordBatch views, iteration, CRC, compression codecs and the record codec."""

from __future__ import annotations

import gzip
import struct

import cramjam
import pytest
from crc32c import crc32c

from mm2py.protocol.compression import XERIAL_MAGIC, Codec, compress, decompress
from mm2py.protocol.errors import CorruptBatchError, ProtocolError, UnsupportedError
from mm2py.protocol.record_codec import (
    Record,
    build_batch,
    decode_records,
    read_varint,
    read_varlong,
    varint_bytes,
)
from mm2py.protocol.records import HEADER_SIZE, RecordBatch, iter_batches, split_record_set

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path

BASE_TS = 1_700_000_000_000


def sample_records(n: int = 5, value_size: int = 50) -> list[Record]:
    return [
        Record(
            offset_delta=i,
            timestamp_delta=i * 7,
            key=None if i % 3 == 2 else f"key-{i}".encode(),
            value=None if i == 3 else bytes([i % 251]) * (value_size + i),
            headers=(("h1", b"v1"), ("null", None), ("é\udcff", b"")) if i % 2 else (),
        )
        for i in range(n)
    ]


def make_batch(codec: Codec = Codec.NONE, base_offset: int = 1000, n: int = 5, **kw: object) -> bytes:
    return build_batch(
        sample_records(n), codec=codec, base_offset=base_offset, base_timestamp=BASE_TS, **kw  # type: ignore[arg-type]
    )


# ---------------------------------------------------------------------------------- header/view
@pytest.mark.parametrize("codec", list(Codec))
def test_round_trip_every_codec(codec: Codec) -> None:
    recs = sample_records(7)
    data = build_batch(
        recs,
        codec=codec,
        base_offset=42,
        base_timestamp=BASE_TS,
        producer_id=9,
        producer_epoch=3,
        base_sequence=11,
        partition_leader_epoch=5,
    )
    b = RecordBatch(data)
    assert b.crc_ok()
    b.verify()
    assert b.codec is codec
    assert (b.base_offset, b.last_offset_delta, b.last_offset, b.next_offset) == (42, 6, 48, 49)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (9, 3, 11)
    assert b.partition_leader_epoch == 5
    assert b.magic == 2
    assert b.records_count == 7
    assert b.size == len(data) == b.batch_length + 12
    assert b.base_timestamp == BASE_TS
    assert b.max_timestamp == BASE_TS + 6 * 7
    assert b.is_contiguous()
    assert not (b.is_transactional or b.is_control or b.has_delete_horizon)
    assert b.timestamp_type == 0
    assert decode_records(b) == recs
    assert bytes(b) == data


def test_attribute_flags() -> None:
    b = RecordBatch(
        make_batch(Codec.LZ4, timestamp_type=1, transactional=True, control=True, producer_id=4)
    )
    assert b.attributes == 3 | 0x08 | 0x10 | 0x20
    assert b.timestamp_type == 1 and b.is_transactional and b.is_control
    assert not b.has_delete_horizon


def test_header_layout_matches_spec_offsets() -> None:
    data = make_batch(base_offset=0x0102030405060708, producer_id=0x1112131415161718)
    assert struct.unpack_from(">q", data, 0)[0] == 0x0102030405060708
    assert struct.unpack_from(">i", data, 8)[0] == len(data) - 12
    assert data[16] == 2
    assert struct.unpack_from(">I", data, 17)[0] == crc32c(data[21:])
    assert struct.unpack_from(">q", data, 43)[0] == 0x1112131415161718
    assert struct.unpack_from(">i", data, 57)[0] == 5


def test_kio_reads_what_build_batch_writes() -> None:
    readers = pytest.importorskip("kio.records.readers")
    recs = sample_records(4)
    data = build_batch(recs, base_offset=77, base_timestamp=BASE_TS, producer_id=5)
    parsed, size = readers.read_batch(data, 0)
    assert size == len(data)
    assert parsed.base_offset == 77 and parsed.producer_id == 5
    assert [r.offset for r in parsed.records] == [77 + r.offset_delta for r in recs]
    assert [r.key for r in parsed.records] == [r.key for r in recs]
    assert [r.value for r in parsed.records] == [r.value for r in recs]
    for got, rec in zip(parsed.records, recs, strict=True):
        assert [(h.key, h.value) for h in got.headers] == [
            (k.encode("utf-8", "surrogateescape"), v) for k, v in rec.headers
        ]


def test_every_single_byte_flip_in_crc_range_is_detected() -> None:
    data = make_batch(Codec.NONE, n=3)
    for pos in range(17, len(data)):  # the CRC itself and everything it covers
        mutated = bytearray(data)
        mutated[pos] ^= 0x5A
        b = RecordBatch(mutated)
        assert not b.crc_ok(), pos
        with pytest.raises(CorruptBatchError, match=r"offset 1000.*0x[0-9a-f]{8}.*0x[0-9a-f]{8}"):
            b.verify()


def test_bytes_outside_crc_range_do_not_affect_crc() -> None:
    data = make_batch()
    b = RecordBatch(data)
    for new_base, ple in [(0, -1), (123456789, 7), (-5, 0)]:
        r = RecordBatch(b.rebased(new_base, ple))
        assert r.crc_ok()
        assert (r.base_offset, r.partition_leader_epoch) == (new_base, ple)
        assert bytes(r.buf[16:]) == data[16:]
        assert decode_records(r) == decode_records(b)


@pytest.mark.parametrize(
    ("mutate", "exc"),
    [
        (lambda d: d[:60], CorruptBatchError),
        (lambda d: d[:10], CorruptBatchError),
        (lambda d: d + b"\x00", CorruptBatchError),
        (lambda d: d[:16] + b"\x01" + d[17:], UnsupportedError),
        (lambda d: d[:16] + b"\x00" + d[17:], UnsupportedError),
        (lambda d: d[:16] + b"\x03" + d[17:], CorruptBatchError),
    ],
)
def test_record_batch_constructor_validates(mutate, exc) -> None:
    with pytest.raises(exc):
        RecordBatch(mutate(make_batch()))


def test_unknown_codec_bits_raise_protocol_error() -> None:
    data = bytearray(make_batch())
    data[22] |= 0x07  # codec id 7
    with pytest.raises(CorruptBatchError):
        _ = RecordBatch(data).codec


# ---------------------------------------------------------------------------------- iteration
def test_iter_batches_with_truncated_tail_at_every_cut() -> None:
    batches = [make_batch(c, base_offset=10 * i, n=2 + i) for i, c in enumerate(Codec)]
    whole = b"".join(batches)
    ends = []
    total = 0
    for b in batches:
        total += len(b)
        ends.append(total)
    for cut in range(len(whole) + 1):
        got, left = split_record_set(memoryview(whole)[:cut])
        complete = sum(1 for e in ends if e <= cut)
        assert len(got) == complete
        assert left == cut - (ends[complete - 1] if complete else 0)
        assert [bytes(g) for g in got] == batches[:complete]
        assert all(g.crc_ok() for g in got)
    views = list(iter_batches(whole))
    assert [v.base_offset for v in views] == [0, 10, 20, 30, 40]
    assert views[1].buf.obj is whole  # zero copy: a slice of the caller's buffer


@pytest.mark.parametrize("bad_length", [-1, -(2**31), 0, 13, 48])
def test_iter_batches_rejects_impossible_length(bad_length: int) -> None:
    data = bytearray(make_batch())
    struct.pack_into(">i", data, 8, bad_length)
    with pytest.raises(CorruptBatchError):
        list(iter_batches(bytes(make_batch()) + bytes(data)))


@pytest.mark.parametrize(("magic", "exc"), [(0, UnsupportedError), (1, UnsupportedError),
                                            (3, CorruptBatchError), (255, CorruptBatchError)])
def test_iter_batches_rejects_other_magic(magic: int, exc: type[Exception]) -> None:
    data = bytearray(make_batch())
    data[16] = magic
    with pytest.raises(exc):
        list(iter_batches(data))


def test_iter_batches_empty_and_tiny_inputs() -> None:
    assert list(iter_batches(b"")) == []
    assert split_record_set(b"\x00" * 11) == ([], 11)


# ---------------------------------------------------------------------------------- codecs
@pytest.mark.parametrize("codec", list(Codec))
def test_compress_round_trip(codec: Codec) -> None:
    data = bytes(range(256)) * 600 + b"tail"  # > 64 KiB: several snappy chunks / lz4 blocks
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, data))) == data
    assert decompress(codec, compress(codec, b"")) == b""


def test_snappy_writes_xerial_and_reads_raw_and_xerial() -> None:
    data = b"snappy " * 10000
    framed = compress(Codec.SNAPPY, data)
    assert framed.startswith(XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01")
    # chunk lengths walk to the exact end and each chunk holds <= 32 KiB
    pos, chunks = 16, 0
    while pos < len(framed):
        (n,) = struct.unpack_from(">i", framed, pos)
        chunk = bytes(cramjam.snappy.decompress_raw(framed[pos + 4 : pos + 4 + n]))
        assert len(chunk) <= 32 * 1024
        pos += 4 + n
        chunks += 1
    assert pos == len(framed) and chunks == 3
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Codec.SNAPPY, raw) == data
    # snappy-java accepts concatenated xerial streams
    assert decompress(Codec.SNAPPY, framed + compress(Codec.SNAPPY, b"more")) == data + b"more"


def test_lz4_frames_use_independent_blocks() -> None:
    framed = compress(Codec.LZ4, b"x" * 200_000)
    assert framed[:4] == b"\x04\x22\x4d\x18"
    flg = framed[4]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # block independence: Kafka's Java reader decodes blocks one by one


def test_concatenated_gzip_members_and_zstd_frames() -> None:
    assert decompress(Codec.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"
    zs = bytes(cramjam.zstd.compress(b"ab")) + bytes(cramjam.zstd.compress(b"cd"))
    assert decompress(Codec.ZSTD, zs) == b"abcd"


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_decompress_garbage_raises_protocol_error(codec: Codec) -> None:
    good = compress(codec, b"hello world " * 100)
    for bad in (b"", b"\x00garbage", good[: len(good) // 2], XERIAL_MAGIC + b"\0\0\0\1\0\0\0\1\0\0\0\x09ab"):
        if codec is Codec.SNAPPY and bad == b"":
            continue  # an empty raw snappy block is not an error in any reader
        with pytest.raises(ProtocolError):
            decompress(codec, bad)


def test_unknown_codec_is_unsupported() -> None:
    with pytest.raises(UnsupportedError):
        decompress(5, b"x")
    with pytest.raises(UnsupportedError):
        compress(6, b"x")


# ---------------------------------------------------------------------------------- varints
@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"), (-64, b"\x7f"),
     (64, b"\x80\x01"), (300, b"\xd8\x04"), (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
     (-(2**31), b"\xff\xff\xff\xff\x0f")],
)
def test_varint_known_encodings(value: int, encoded: bytes) -> None:
    assert varint_bytes(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))
    assert read_varlong(encoded, 0) == (value, len(encoded))


def test_varlong_extremes_and_limits() -> None:
    for v in (2**63 - 1, -(2**63), 2**40, -(2**40) - 1):
        enc = varint_bytes(v, long=True)
        assert read_varlong(enc, 0) == (v, len(enc))
    with pytest.raises(ValueError):
        varint_bytes(2**31)
    with pytest.raises(ValueError):
        varint_bytes(2**63, long=True)
    with pytest.raises(CorruptBatchError):
        read_varint(b"\xff" * 5 + b"\x01", 0)
    with pytest.raises(CorruptBatchError):
        read_varlong(b"\xff" * 10 + b"\x01", 0)


def test_decode_rejects_trailing_bytes_and_short_count() -> None:
    recs = sample_records(3)
    data = bytearray(build_batch(recs, base_timestamp=BASE_TS))
    struct.pack_into(">i", data, 57, 2)  # declare one record fewer than present
    with pytest.raises(CorruptBatchError, match="remain"):
        decode_records(RecordBatch(data))
    struct.pack_into(">i", data, 57, 4)  # declare one record more than present
    with pytest.raises(CorruptBatchError):
        decode_records(RecordBatch(data))
    assert HEADER_SIZE == 61
