"""Property tests: decoders raise only ProtocolError subclasses on bad input, and never hang."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mm2py.protocol.batch_edit import crop, needs_rebuild, rebuild_contiguous, strip_producer_state
from mm2py.protocol.compression import Codec, compress, decompress
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.record_codec import Record, build_batch, decode_records
from mm2py.protocol.records import RecordBatch, iter_batches, split_record_set
from mm2py.protocol.transactions import AbortedTransactionFilter
from tests.support.hypothesis_examples import examples

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path

FUZZ = settings(
    max_examples=examples(200),
    deadline=timedelta(milliseconds=1000),
    suppress_health_check=[HealthCheck.too_slow],
)
TS = 1_700_000_000_000


def _valid_batches() -> list[bytes]:
    recs = [
        Record(i, i * 3, f"k{i}".encode(), bytes([i]) * (20 + i), (("h", b"v"),) if i % 2 else ())
        for i in range(6)
    ]
    out = [
        build_batch(recs, codec=c, base_offset=100, base_timestamp=TS, producer_id=5,
                    producer_epoch=1, base_sequence=0)
        for c in Codec
    ]
    gappy = [r for r in recs if r.offset_delta != 2]
    out.append(build_batch(gappy, base_offset=100, base_timestamp=TS, last_offset_delta=5))
    return out


VALID = _valid_batches()


def exercise(data: bytes | bytearray) -> None:
    """Run every decoder on ``data``; only ProtocolError subclasses may escape."""
    try:
        batches, _left = split_record_set(data)
    except ProtocolError:
        batches = []
    try:
        single = RecordBatch(data)
        batches.append(single)
    except ProtocolError:
        pass
    for b in batches:
        # header properties never raise (except the codec id check, a ProtocolError)
        _ = (b.base_offset, b.last_offset, b.next_offset, b.records_count, b.producer_id)
        for op in (
            b.verify,
            lambda b=b: decode_records(b),
            lambda b=b: crop(b, b.base_offset + 2),
            lambda b=b: rebuild_contiguous(b),
            lambda b=b: needs_rebuild(b),
            lambda b=b: strip_producer_state(b, verify=False),
            lambda b=b: AbortedTransactionFilter([(b.producer_id, 0)]).accept(b),
        ):
            with contextlib.suppress(ProtocolError):
                op()


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    exercise(data)


@FUZZ
@given(st.binary(min_size=12, max_size=200))
def test_random_bytes_behind_a_plausible_header(tail: bytes) -> None:
    # a real batch start (so iteration gets past the length and magic checks) + random bytes
    data = bytearray(VALID[0][:61]) + tail
    data[8:12] = (len(data) - 12).to_bytes(4, "big")
    exercise(data)


@FUZZ
@given(
    st.sampled_from(range(len(VALID))),
    st.data(),
    st.integers(min_value=0, max_value=255),
)
def test_single_byte_mutations_of_valid_batches(which: int, draw: st.DataObject, value: int) -> None:
    src = VALID[which]
    pos = draw.draw(st.integers(min_value=0, max_value=len(src) - 1))
    mutated = bytearray(src)
    changed = mutated[pos] != value
    mutated[pos] = value
    exercise(mutated)
    exercise(bytes(mutated) + VALID[0])  # a corrupted batch followed by a good one
    if changed and pos >= 17:
        # any change inside the CRC range (or to the CRC) is caught by the CRC check
        try:
            b = RecordBatch(mutated)
        except ProtocolError:
            return
        assert not b.crc_ok()


@FUZZ
@given(st.sampled_from([Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]), st.binary(max_size=300))
def test_decompress_random_input(codec: Codec, data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decompress(codec, data)


@FUZZ
@given(
    st.sampled_from(list(Codec)),
    st.data(),
    st.integers(min_value=0, max_value=255),
)
def test_decompress_mutated_input(codec: Codec, draw: st.DataObject, value: int) -> None:
    good = compress(codec, b"The quick brown fox " * 50)
    pos = draw.draw(st.integers(min_value=0, max_value=len(good) - 1))
    bad = bytearray(good)
    bad[pos] = value
    with contextlib.suppress(ProtocolError):
        decompress(codec, bytes(bad))


headers_st = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
).map(tuple)
record_st = st.tuples(
    st.integers(min_value=-(2**40), max_value=2**40),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=200)),
    headers_st,
)


@FUZZ
@given(
    st.lists(record_st, min_size=1, max_size=12),
    st.lists(st.integers(min_value=1, max_value=5), min_size=12, max_size=12),
    st.sampled_from(list(Codec)),
    st.data(),
)
def test_build_decode_crop_rebuild_properties(
    fields: list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]],
    gaps: list[int],
    codec: Codec,
    draw: st.DataObject,
) -> None:
    deltas = []
    d = draw.draw(st.integers(min_value=0, max_value=3))
    for g in gaps[: len(fields)]:
        deltas.append(d)
        d += g
    recs = [
        Record(off, ts, key, value, headers)
        for off, (ts, key, value, headers) in zip(deltas, fields, strict=True)
    ]
    base = draw.draw(st.integers(min_value=0, max_value=2**40))
    batch = RecordBatch(build_batch(recs, codec=codec, base_offset=base, base_timestamp=TS))
    assert batch.crc_ok()
    assert decode_records(batch) == recs
    absolute = [(base + r.offset_delta, TS + r.timestamp_delta, r.key, r.value) for r in recs]

    start = draw.draw(st.integers(min_value=base, max_value=batch.last_offset + 1))
    cropped = crop(batch, start)
    kept = [a for a in absolute if a[0] >= start]
    if not kept:
        assert cropped is None
    else:
        assert cropped is not None and cropped.crc_ok()
        got = [
            (cropped.base_offset + r.offset_delta, cropped.base_timestamp + r.timestamp_delta,
             r.key, r.value)
            for r in decode_records(cropped)
        ]
        assert got == kept

    rebuilt, origin = rebuild_contiguous(batch)
    assert origin == [a[0] for a in absolute]
    assert rebuilt.crc_ok() and rebuilt.is_contiguous() and not needs_rebuild(rebuilt)
    assert [(r.key, r.value, r.headers) for r in decode_records(rebuilt)] == [
        (r.key, r.value, r.headers) for r in recs
    ]
    assert needs_rebuild(batch) == (deltas != list(range(len(recs))))


def test_iter_batches_never_loops_on_zero_progress() -> None:
    # a length field that claims the minimum keeps advancing; this must terminate
    data = bytearray(VALID[0]) * 50
    assert len(list(iter_batches(data))) == 50
    with pytest.raises(ProtocolError):
        list(iter_batches(b"\x00" * 8 + b"\x00\x00\x00\x00" + b"\x00" * 100))
