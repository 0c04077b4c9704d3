"""The audit's comparison of a source partition with its remote partition, on bytes: batches the
mirror passed through (compared by their records sections' CRC, no decompression), batches it
cropped, merged or rebuilt and another mirror's own batching (compared record by record), and each
kind of mismatch at its exact offsets."""

from __future__ import annotations

import pytest

from mm2py.connectors.outgoing import CoalesceSettings
from mm2py.engine.audit import CompareMode, MismatchKind, OffsetRange
from mm2py.engine.audit.records import batch_print
from mm2py.protocol.batch_edit import crop
from mm2py.protocol.compression import Codec, CodecCounters
from mm2py.protocol.record_codec import Record, build_batch
from mm2py.protocol.records import RecordBatch
from tests.support.audit_batches import BASE_TS, batches, mirrored, rebatched, record, walk

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("chunk", [0, 1, 3])
def test_batches_mirrored_as_they_came_agree_without_decompressing(codec: Codec, chunk: int) -> None:
    source = batches(6, 40, codec=codec, start=1000)
    target = mirrored(source, target_start=70)
    assert [b.producer_id for b in target] == [4242] * 6  # the mirror's producer fields, new CRCs
    before = CodecCounters.snapshot()
    w = walk(source, target, chunk=chunk)
    assert CodecCounters.snapshot() == before
    assert w.mismatch is None and w.mode is CompareMode.BATCHES and w.batches_identical == 6
    assert w.verified == (OffsetRange(1000, 1240), OffsetRange(70, 310))


def test_the_batch_print_leaves_out_what_the_mirror_rewrites_and_nothing_else() -> None:
    source = batches(1, 5, codec=Codec.ZSTD)[0]
    target = mirrored([source], target_start=99)[0]
    assert bytes(source) != bytes(target) and batch_print(source) == batch_print(target)
    other_ts = RecordBatch(build_batch([record(0)], base_timestamp=BASE_TS + 1))
    same_ts = RecordBatch(build_batch([record(0)], base_timestamp=BASE_TS))
    assert batch_print(other_ts)[:5] != batch_print(same_ts)[:5]
    assert batch_print(other_ts)[5] == batch_print(same_ts)[5]  # the records section alone


@pytest.mark.parametrize("chunk", [0, 2])
def test_coalesced_small_batches_agree_record_by_record(chunk: int) -> None:
    source = batches(60, 3, codec=Codec.LZ4, gaps=[30])
    target = mirrored(source, coalesce=CoalesceSettings(threshold=8192, target=2048))
    assert len(target) < len(source)
    w = walk(source, target, chunk=chunk)
    assert w.mismatch is None and w.mode is CompareMode.RECORDS
    assert w.verified == (OffsetRange(0, 183), OffsetRange(0, 180))
    assert w.source.gaps_seen


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.ZSTD])
def test_a_target_rebatched_by_a_record_level_mirror_agrees(codec: Codec) -> None:
    source = batches(10, 25, codec=Codec.LZ4, start=500)
    target = rebatched(source, size=17, codec=codec, target_start=3)
    w = walk(source, target, chunk=2)
    assert w.mismatch is None and w.mode is CompareMode.RECORDS and w.records_compared == 250
    assert w.verified == (OffsetRange(500, 750), OffsetRange(3, 253))


def test_a_resume_mid_batch_and_then_whole_batches_again() -> None:
    source = batches(4, 10, codec=Codec.GZIP)
    target = mirrored([crop(source[0], 6), *source[1:]])  # the mirror resumed at offset 6
    w = walk(source, target, source_start=6)
    assert w.mismatch is None and w.verified == (OffsetRange(6, 40), OffsetRange(0, 34))
    assert w.batches_identical >= 3  # after the cropped batch, whole batches again


def test_compaction_gaps_closed_by_the_mirror_agree() -> None:
    recs = [record(i, delta=2 * i) for i in range(8)]
    source = [RecordBatch(build_batch(recs, codec=Codec.SNAPPY, base_offset=10, base_timestamp=BASE_TS))]
    source += batches(2, 5, start=25, first_value=100)
    target = mirrored(source)
    w = walk(source, target)
    assert w.mismatch is None and w.verified == (OffsetRange(10, 35), OffsetRange(0, 18))
    assert w.source.gaps_seen


def test_a_record_produced_straight_into_the_remote_topic_is_extra_at_its_target_offset() -> None:
    source = batches(5, 20)
    target = mirrored(source[:2])
    foreign = RecordBatch(build_batch([Record(0, 0, b"intruder", b"x")], base_offset=40,
                                      base_timestamp=BASE_TS))
    target += [foreign, *mirrored(source[2:], target_start=41)]
    for chunk in (0, 1):
        w = walk(source, target, chunk=chunk)
        assert w.mismatch is not None and w.mismatch.kind is MismatchKind.EXTRA
        assert w.mismatch.target == OffsetRange(40, 41) and w.mismatch.source == OffsetRange(40, 41)
        assert w.verified == (OffsetRange(0, 40), OffsetRange(0, 40))


def test_records_past_the_source_end_are_extra() -> None:
    source = batches(3, 10)
    extra = RecordBatch(build_batch([Record(0, 0, b"k", b"v"), Record(1, 0, b"k", b"w")], base_offset=30,
                                    base_timestamp=BASE_TS))
    w = walk(source, [*mirrored(source), extra])
    assert w.mismatch is not None and w.mismatch.kind is MismatchKind.EXTRA
    assert w.mismatch.target == OffsetRange(30, 32) and w.mismatch.source is None


def test_a_batch_missing_on_the_target_names_the_source_offsets() -> None:
    source = batches(6, 10, start=200)
    target = mirrored(source[:2]) + mirrored(source[4:], target_start=20)
    w = walk(source, target, chunk=1)
    assert w.mismatch is not None and w.mismatch.kind is MismatchKind.MISSING
    assert w.mismatch.source == OffsetRange(220, 240) and w.mismatch.target == OffsetRange(20, 21)


def test_one_missing_record_inside_a_batch() -> None:
    source = batches(2, 10)
    kept = [i for i in range(10) if i != 4]
    recs = [Record(j, i * 3, *_fields(record(i))) for j, i in enumerate(kept)]
    target = [RecordBatch(build_batch(recs, base_timestamp=BASE_TS)), *mirrored(source[1:], target_start=9)]
    w = walk(source, target)
    assert w.mismatch is not None and w.mismatch.kind is MismatchKind.MISSING
    assert w.mismatch.source == OffsetRange(4, 5) and w.mismatch.target == OffsetRange(4, 5)


def _fields(r: Record) -> tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]:
    return r.key, r.value, r.headers


def test_different_bytes_say_what_differs() -> None:
    source = batches(3, 10, codec=Codec.ZSTD)
    recs = [record(10 + j, j, j * 3) for j in range(10)]
    recs[5] = Record(5, 15, recs[5].key, b"tampered", recs[5].headers)
    changed = RecordBatch(build_batch(recs, base_offset=10, base_timestamp=BASE_TS + 10))
    target = [*mirrored(source[:1]), changed, *mirrored(source[2:], target_start=20)]
    w = walk(source, target)
    assert w.mismatch is not None and w.mismatch.kind is MismatchKind.DIFFERENT
    assert w.mismatch.source == OffsetRange(15, 16) and w.mismatch.target == OffsetRange(15, 16)
    assert "value" in w.mismatch.detail and "tampered" in w.mismatch.detail
    assert "key" not in w.mismatch.detail and "timestamp" not in w.mismatch.detail


def test_a_different_timestamp_is_a_difference() -> None:
    source = batches(1, 4)
    recs = [record(j, j, j * 3) for j in range(4)]
    recs[2] = Record(2, 999, recs[2].key, recs[2].value, recs[2].headers)
    w = walk(source, [RecordBatch(build_batch(recs, base_timestamp=BASE_TS))])
    assert w.mismatch is not None and w.mismatch.kind is MismatchKind.DIFFERENT
    assert w.mismatch.detail == f"timestamp {BASE_TS + 6} != {BASE_TS + 999}"


def test_records_mirrored_twice_are_extra() -> None:
    source = batches(4, 10)
    target = mirrored(source[:3]) + mirrored(source[1:], target_start=30)
    w = walk(source, target, chunk=1)
    assert w.mismatch is not None and w.mismatch.kind is MismatchKind.EXTRA
    assert w.mismatch.target == OffsetRange(30, 50)


def test_source_records_not_mirrored_yet_are_no_mismatch() -> None:
    source = batches(5, 10)
    w = walk(source, mirrored(source[:3]))
    assert w.done and w.mismatch is None and w.verified == (OffsetRange(0, 30), OffsetRange(0, 30))


def test_nothing_past_either_end_is_compared() -> None:
    source = batches(5, 10)
    target = mirrored(source)
    w = walk(source, target, source_end=50, target_end=25)  # the target's end read mid-batch
    assert w.mismatch is None and w.verified == (OffsetRange(0, 25), OffsetRange(0, 25))
    w = walk(source, target, source_end=25, target_end=30)
    assert w.mismatch is not None and w.mismatch.kind is MismatchKind.EXTRA
    assert w.mismatch.target == OffsetRange(25, 30)


def test_a_source_fed_from_before_its_start_is_cropped_to_it() -> None:
    source = batches(2, 10, codec=Codec.LZ4)
    target = mirrored([crop(source[0], 3), source[1]])
    w = walk(source, target, source_start=3)
    assert w.mismatch is None and w.verified == (OffsetRange(3, 20), OffsetRange(0, 17))


@pytest.mark.parametrize("codec", list(Codec))
def test_records_read_for_comparison_are_the_records(codec: Codec) -> None:
    from mm2py.engine.audit.records import keys_and_values, parse_body, records_of
    from mm2py.protocol.record_codec import decode_records

    source = batches(2, 30, codec=codec, start=77)
    recs = [record(i, delta=2 * i, ts_delta=-5 * i) for i in range(9)]  # gaps, timestamps going back
    for b in [*source, RecordBatch(build_batch(recs, codec=codec, base_offset=9, base_timestamp=BASE_TS))]:
        got = records_of(b)
        want = decode_records(b)
        assert got.offsets == [b.base_offset + r.offset_delta for r in want]
        assert [ts for ts, _ in got.contents] == [b.base_timestamp + r.timestamp_delta for r in want]
        fields = [parse_body(body) for _, body in got.contents]
        assert fields == [(r.key, r.value, tuple((k.encode(), v) for k, v in r.headers)) for r in want]
        assert keys_and_values(b) == [f[:2] for f in fields]


def test_a_log_append_time_batch_s_records_carry_its_timestamp() -> None:
    from mm2py.engine.audit.records import records_of

    b = RecordBatch(build_batch([record(i, i, i) for i in range(3)], base_timestamp=BASE_TS,
                                max_timestamp=BASE_TS + 500, timestamp_type=1))
    assert [ts for ts, _ in records_of(b).contents] == [BASE_TS + 500] * 3


def test_a_corrupt_records_section_is_refused() -> None:
    from mm2py.engine.audit.records import records_of
    from mm2py.protocol.errors import CorruptBatchError
    from mm2py.protocol.record_codec import assemble_batch

    good = batches(1, 3, codec=Codec.NONE)[0]
    section = bytes(good.records_view)
    for bad in (section[:-1], section + b"\x00", b"\x7f" + section[1:]):
        batch = RecordBatch(assemble_batch(bad, records_count=3, attributes=0, last_offset_delta=2,
                                           base_offset=0, base_timestamp=BASE_TS, max_timestamp=BASE_TS,
                                           producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                           partition_leader_epoch=-1))
        with pytest.raises(CorruptBatchError):
            records_of(batch)
