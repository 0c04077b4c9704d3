"""Producer-state rewrites, cropping and renumbering of record batches."""

from __future__ import annotations

import pytest

from mm2py.protocol.batch_edit import (
    crop,
    increment_sequence,
    needs_rebuild,
    rebuild_contiguous,
    set_producer_state,
    strip_producer_state,
)
from mm2py.protocol.compression import Codec
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.record_codec import (
    Record,
    assemble_batch,
    build_batch,
    decode_records,
    encode_record,
)
from mm2py.protocol.records import RecordBatch

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path

BASE_TS = 1_700_000_000_000


def recs_with(deltas: list[int], ts_deltas: list[int] | None = None) -> list[Record]:
    ts = ts_deltas if ts_deltas is not None else [((d * 37) % 11) - 3 for d in deltas]
    return [
        Record(
            offset_delta=d,
            timestamp_delta=t,
            key=f"k{d}".encode(),
            value=(f"value-{d}-" * (d + 1)).encode(),
            headers=(("idx", str(d).encode()),) if d % 2 else (),
        )
        for d, t in zip(deltas, ts, strict=True)
    ]


Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def absolute(batch: RecordBatch) -> list[Row]:
    """(offset, timestamp, key, value, headers) of each record, independent of the framing."""
    return [
        (
            batch.base_offset + r.offset_delta,
            batch.base_timestamp + r.timestamp_delta,
            r.key,
            r.value,
            r.headers,
        )
        for r in decode_records(batch)
    ]


def producer_batch(codec: Codec = Codec.NONE, **kw: object) -> RecordBatch:
    args: dict[str, object] = dict(
        codec=codec, base_offset=500, base_timestamp=BASE_TS, producer_id=1234,
        producer_epoch=7, base_sequence=40, transactional=True, partition_leader_epoch=3,
    )
    args.update(kw)
    return RecordBatch(build_batch(recs_with(list(range(6))), **args))  # type: ignore[arg-type]


# ------------------------------------------------------------------------- producer state
@pytest.mark.parametrize("codec", list(Codec))
def test_strip_producer_state(codec: Codec) -> None:
    src = producer_batch(codec)
    out = RecordBatch(strip_producer_state(src))
    assert out.crc_ok()
    assert (out.producer_id, out.producer_epoch, out.base_sequence) == (-1, -1, -1)
    assert not out.is_transactional
    assert bytes(out.records_view) == bytes(src.records_view)  # records byte-identical
    assert out.codec is codec
    for name in ("base_offset", "partition_leader_epoch", "last_offset_delta", "base_timestamp",
                 "max_timestamp", "records_count", "timestamp_type", "is_control"):
        assert getattr(out, name) == getattr(src, name), name
    assert decode_records(out) == decode_records(src)


def test_strip_without_state_is_a_copy() -> None:
    src = RecordBatch(build_batch(recs_with([0, 1]), base_timestamp=BASE_TS))
    assert strip_producer_state(src) == bytes(src)


def test_strip_refuses_to_reseal_a_corrupt_batch() -> None:
    data = bytearray(bytes(producer_batch()))
    data[-1] ^= 1
    with pytest.raises(CorruptBatchError):
        strip_producer_state(RecordBatch(data))
    # the caller may opt out when it verified already; the CRC is carried over, not made afresh,
    # so the result still fails its check (a broker refuses it)
    assert not RecordBatch(strip_producer_state(RecordBatch(data), verify=False)).crc_ok()


def test_set_producer_state() -> None:
    src = producer_batch(Codec.ZSTD)
    out = RecordBatch(set_producer_state(src, 99, 2, 1000))
    assert out.crc_ok()
    assert (out.producer_id, out.producer_epoch, out.base_sequence) == (99, 2, 1000)
    assert not out.is_transactional
    assert bytes(out.records_view) == bytes(src.records_view)
    txn = RecordBatch(set_producer_state(src, 99, 2, 0, transactional=True))
    assert txn.is_transactional and txn.crc_ok()
    with pytest.raises(ValueError):
        set_producer_state(src, 2**63, 0, 0)


# ------------------------------------------------------------------------- crop
@pytest.mark.parametrize("codec", list(Codec))
def test_crop_at_every_offset(codec: Codec) -> None:
    src = producer_batch(codec)
    before = absolute(src)
    for start in range(src.base_offset - 2, src.last_offset + 3):
        out = crop(src, start)
        expected = [r for r in before if r[0] >= start]
        if start <= src.base_offset:
            assert out is src
            continue
        if not expected:
            assert out is None
            continue
        assert out is not None
        assert out.crc_ok()
        assert out.codec is codec
        assert absolute(out) == expected
        assert out.base_offset == expected[0][0]
        assert out.base_timestamp == expected[0][1]
        assert out.max_timestamp == max(r[1] for r in expected)
        assert out.next_offset == src.next_offset
        assert out.records_count == len(expected)
        assert out.is_contiguous()
        assert [r.offset_delta for r in decode_records(out)] == list(range(len(expected)))
        # producer fields kept; each record keeps its sequence number
        assert (out.producer_id, out.producer_epoch) == (src.producer_id, src.producer_epoch)
        assert out.base_sequence == src.base_sequence + (out.base_offset - src.base_offset)
        assert (out.is_transactional, out.partition_leader_epoch) == (True, 3)


def test_crop_with_gaps_keeps_absolute_offsets_and_last_offset() -> None:
    src = RecordBatch(
        build_batch(recs_with([0, 3, 4, 9]), base_offset=100, base_timestamp=BASE_TS,
                    last_offset_delta=12)
    )
    out = crop(src, 101)
    assert out is not None
    assert [r[0] for r in absolute(out)] == [103, 104, 109]
    assert out.base_offset == 103 and out.last_offset == 112
    assert crop(src, 110) is None  # below lastOffset, but no record left
    assert crop(src, 113) is None


def test_crop_log_append_time_keeps_max_timestamp() -> None:
    src = RecordBatch(
        build_batch(recs_with([0, 1, 2]), base_timestamp=BASE_TS, timestamp_type=1,
                    max_timestamp=BASE_TS + 10_000)
    )
    out = crop(src, 1)
    assert out is not None and out.timestamp_type == 1
    assert out.max_timestamp == BASE_TS + 10_000


def test_crop_sequence_wraps_like_kafka() -> None:
    assert increment_sequence(2**31 - 2, 1) == 2**31 - 1
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 5) == 3
    src = producer_batch(base_sequence=2**31 - 2)
    out = crop(src, src.base_offset + 3)
    assert out is not None and out.base_sequence == 1


# ------------------------------------------------------------------------- rebuild
@pytest.mark.parametrize("codec", list(Codec))
def test_rebuild_contiguous_with_gaps(codec: Codec) -> None:
    deltas = [1, 2, 5, 6, 7, 20]
    src = RecordBatch(
        build_batch(recs_with(deltas), codec=codec, base_offset=1000, base_timestamp=BASE_TS,
                    last_offset_delta=25, producer_id=8, producer_epoch=0, base_sequence=0)
    )
    assert not src.is_contiguous() and needs_rebuild(src)
    out, origin = rebuild_contiguous(src)
    assert origin == [1000 + d for d in deltas]
    assert out.crc_ok() and out.is_contiguous() and not needs_rebuild(out)
    assert out.codec is codec
    assert out.base_offset == origin[0]
    assert out.last_offset_delta == len(deltas) - 1
    assert [r.offset_delta for r in decode_records(out)] == list(range(len(deltas)))
    old = absolute(src)
    new = absolute(out)
    # record i now sits at out.base_offset + i and came from origin[i]; payload and time unchanged
    for i, (o, n) in enumerate(zip(old, new, strict=True)):
        assert n[0] == out.base_offset + i and o[0] == origin[i]
        assert n[1:] == o[1:]
    assert out.max_timestamp == src.max_timestamp
    assert out.base_sequence == 1  # sequence of the first record (base 0 + delta 1)


def test_rebuild_empty_batch() -> None:
    src = RecordBatch(build_batch([], base_offset=7, base_timestamp=BASE_TS, last_offset_delta=3))
    out, origin = rebuild_contiguous(src)
    assert out is src and origin == []


def test_needs_rebuild_checks_uncompressed_deltas() -> None:
    # header says contiguous (3 records, lastOffsetDelta 2) but the deltas are 0, 2, 2
    odd = RecordBatch(build_batch(recs_with([0, 2, 2]), base_timestamp=BASE_TS))
    assert odd.is_contiguous()
    assert needs_rebuild(odd)
    assert not needs_rebuild(RecordBatch(build_batch(recs_with([0, 1, 2]), base_timestamp=BASE_TS)))
    with pytest.raises(CorruptBatchError):
        rebuild_contiguous(odd)  # offsets that do not increase are not a valid batch


def test_crop_keeps_delete_horizon_base_timestamp() -> None:
    plain = RecordBatch(build_batch(recs_with([0, 1, 2, 3]), base_timestamp=BASE_TS))
    horizon = BASE_TS + 86_400_000  # the cleaner stores the delete horizon in baseTimestamp
    section = b"".join(
        encode_record(
            Record(r.offset_delta, r.timestamp_delta + BASE_TS - horizon, r.key, r.value, r.headers)
        )
        for r in decode_records(plain)
    )
    src = RecordBatch(
        assemble_batch(
            section,
            records_count=4,
            attributes=0x40,
            last_offset_delta=3,
            base_offset=0,
            base_timestamp=horizon,
            max_timestamp=plain.max_timestamp,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            partition_leader_epoch=0,
        )
    )
    assert src.has_delete_horizon and src.crc_ok()
    assert absolute(src) == absolute(plain)
    out = crop(src, 2)
    assert out is not None and out.has_delete_horizon
    assert out.base_timestamp == horizon
    assert absolute(out) == absolute(plain)[2:]


# ------------------------------------------------------------------------------- for_produce
@pytest.mark.parametrize("codec", list(Codec))
def test_for_produce_stamps_state_in_one_copy_without_touching_records(codec: Codec) -> None:
    from mm2py.protocol.batch_edit import for_produce

    recs = [Record(i, i, f"k{i}".encode(), f"v{i}".encode() * 20, ()) for i in range(12)]
    src = RecordBatch(build_batch(
        recs, codec=codec, base_offset=4242, base_timestamp=BASE_TS, producer_id=77, producer_epoch=3,
        base_sequence=900, transactional=True, partition_leader_epoch=9,
    ))
    out = RecordBatch(for_produce(src, 5, 1, 12))
    assert out.crc_ok()
    assert (out.base_offset, out.partition_leader_epoch) == (0, -1)
    assert (out.producer_id, out.producer_epoch, out.base_sequence) == (5, 1, 12)
    assert not out.is_transactional and out.codec == codec
    assert bytes(out.records_view) == bytes(src.records_view)
    assert (out.last_offset_delta, out.base_timestamp, out.max_timestamp, out.records_count) == (
        src.last_offset_delta, src.base_timestamp, src.max_timestamp, src.records_count)
    stripped = RecordBatch(for_produce(src))
    assert (stripped.producer_id, stripped.producer_epoch, stripped.base_sequence) == (-1, -1, -1)
    assert stripped.crc_ok()


def test_for_produce_refuses_to_reseal_a_corrupt_batch() -> None:
    from mm2py.protocol.batch_edit import for_produce

    raw = bytearray(build_batch([Record(0, 0, b"k", b"v")], base_timestamp=BASE_TS))
    raw[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError):
        for_produce(RecordBatch(bytes(raw)), 1, 0, 0)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4])
def test_records_changed_after_the_crc_was_checked_are_never_sealed_with_a_valid_crc(codec: Codec) -> None:
    """for_produce carries the batch's own CRC over the header edit (crc.py) instead of computing one
    from the records again, so a batch whose records changed after the fetch checked its CRC goes
    out with a CRC that does not match: the target broker refuses it (CORRUPT_MESSAGE)."""
    from mm2py.protocol.batch_edit import for_produce

    recs = [Record(i, i, b"k", f"v{i}".encode() * 30, ()) for i in range(8)]
    fetched = bytearray(build_batch(recs, codec=codec, base_timestamp=BASE_TS, producer_id=3,
                                    producer_epoch=0, base_sequence=40))
    assert RecordBatch(bytes(fetched)).crc_ok()  # as the fetch checked it
    for at in (61, len(fetched) // 2, len(fetched) - 1):  # the records section, first to last byte
        changed = bytearray(fetched)
        changed[at] ^= 0x01
        out = RecordBatch(for_produce(RecordBatch(bytes(changed)), 9, 2, 100, verify=False))
        assert not out.crc_ok(), at
        assert bytes(out.records_view) == bytes(changed[61:])
    intact = RecordBatch(for_produce(RecordBatch(bytes(fetched)), 9, 2, 100, verify=False))
    assert intact.crc_ok() and (intact.producer_id, intact.base_sequence) == (9, 100)
