"""A batch larger than the target's limit split into batches of the same records, each under it."""

from __future__ import annotations

import os
import random

import pytest

from mm2py.protocol.batch_split import split_batch
from mm2py.protocol.compression import Codec
from mm2py.protocol.record_codec import Record, build_batch, decode_records
from mm2py.protocol.records import RecordBatch

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path

BASE_TS = 1_700_000_000_000
CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]

Row = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def rows(batch: RecordBatch) -> list[Row]:
    """(offset, timestamp, attributes, key, value, headers) of each record, whatever the framing."""
    return [(batch.base_offset + r.offset_delta, batch.base_timestamp + r.timestamp_delta, r.attributes,
             r.key, r.value, r.headers) for r in decode_records(batch)]


def big_batch(codec: Codec, count: int = 400, value_size: int = 1000, base: int = 5000,
              seed: int = 7) -> RecordBatch:
    """``count`` records of half-random values (so compression shrinks them, but not to nothing),
    keys, headers on some, timestamps out of order on some, some null keys."""
    rnd = random.Random(seed)
    recs = [
        Record(offset_delta=i, timestamp_delta=i * 3 - (50 if i % 7 == 0 else 0),
               key=None if i % 11 == 0 else f"key-{i}".encode(),
               value=os.urandom(value_size // 2) + bytes(rnd.choices(b"abc", k=value_size // 2)),
               headers=(("h", f"{i}".encode()), ("n", None)) if i % 3 == 0 else ())
        for i in range(count)
    ]
    return RecordBatch(build_batch(recs, codec=codec, base_offset=base, base_timestamp=BASE_TS,
                                   producer_id=42, producer_epoch=1, base_sequence=100))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_the_pieces_hold_the_same_records_in_order_each_under_the_limit(codec: Codec) -> None:
    batch = big_batch(codec)
    limit = batch.size // 3  # at least three pieces
    split = split_batch(batch, limit)
    assert split.too_large is None
    assert len(split.pieces) >= 3
    assert all(p.batch.size <= limit for p in split.pieces)
    assert all(p.batch.codec is codec and p.batch.crc_ok() for p in split.pieces)
    assert [r for p in split.pieces for r in rows(p.batch)] == rows(batch)
    # the pieces cover the records by index, one after the other, and each piece's offsets
    assert [(p.start, p.end) for p in split.pieces] == list(zip(
        [p.start for p in split.pieces], [p.start for p in split.pieces[1:]] + [batch.records_count],
        strict=True))
    assert split.pieces[0].start == 0
    for p in split.pieces:
        assert p.batch.base_offset == batch.base_offset + p.start
        assert p.batch.last_offset == batch.base_offset + p.end - 1
        assert p.batch.records_count == p.end - p.start and p.batch.is_contiguous()
        assert p.batch.attributes == batch.attributes
        assert p.batch.max_timestamp == max(r[1] for r in rows(p.batch))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_pieces_are_filled_not_cut_to_crumbs(codec: Codec) -> None:
    """Cut by the batch's own compression ratio: about as many pieces as the size asks for."""
    batch = big_batch(codec, count=1000)
    limit = batch.size // 4 + 100
    pieces = split_batch(batch, limit).pieces
    assert 4 <= len(pieces) <= 8


def test_a_batch_that_fits_is_left_as_it_is() -> None:
    batch = big_batch(Codec.LZ4, count=10)
    split = split_batch(batch, batch.size)
    assert [(p.batch, p.start, p.end) for p in split.pieces] == [(batch, 0, 10)]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_a_record_too_large_alone_ends_the_split_with_where_and_how_large(codec: Codec) -> None:
    small = [Record(i, i, b"k", b"v" * 100) for i in range(5)]
    huge = Record(5, 5, b"big", os.urandom(50_000))
    after = [Record(6 + i, 6 + i, b"k", b"w" * 100) for i in range(5)]
    batch = RecordBatch(build_batch([*small, huge, *after], codec=codec, base_offset=100,
                                    base_timestamp=BASE_TS))
    split = split_batch(batch, 10_000)
    assert split.too_large is not None
    assert (split.too_large.index, split.too_large.offset) == (5, 105)
    assert split.too_large.size > 50_000
    assert [r for p in split.pieces for r in rows(p.batch)] == rows(batch)[:5]
    assert all(p.batch.size <= 10_000 for p in split.pieces)


def test_the_first_record_too_large_leaves_no_piece() -> None:
    batch = RecordBatch(build_batch([Record(0, 0, None, os.urandom(5000)), Record(1, 0, None, b"x")],
                                    base_offset=9, base_timestamp=BASE_TS))
    split = split_batch(batch, 1000)
    assert split.pieces == [] and split.too_large is not None and split.too_large.offset == 9
