"""Coalescing of small batches: every record kept in order with its offset, timestamp and headers;
runs never cross a gap, a control or transactional batch, a timestamp-type or codec change; offset
translation stays exact across merged batches; merged target batches are recognised on resume."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mm2py.connectors.outgoing import CoalesceSettings, prepare
from mm2py.engine.offset_syncs import OffsetSyncPlanner, OffsetSyncStore
from mm2py.protocol.batch_edit import for_produce
from mm2py.protocol.batch_merge import match_run, merge_eligible
from mm2py.protocol.coalesce import DEFAULT_TARGET, DEFAULT_THRESHOLD, CoalesceCounters, Coalesced, coalesce
from mm2py.protocol.compression import Codec
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.record_codec import Record, build_batch, decode_records
from mm2py.protocol.records import RecordBatch
from tests.support.batch_specs import BASE_TS, TP, Spec, build, sizes_st, small_spec_st, spec_st
from tests.support.hypothesis_examples import examples

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path

Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


def rows(batch: RecordBatch) -> list[Row]:
    """(offset, timestamp, key, value, headers, attributes) of each record."""
    return [(batch.base_offset + r.offset_delta, batch.base_timestamp + r.timestamp_delta, r.key,
             r.value, r.headers, r.attributes) for r in decode_records(batch)]


def _ranges(out: list[Coalesced]) -> list[tuple[int, int, int]]:
    return [(c.first_offset, c.last_offset, c.sources) for c in out]


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.one_of(spec_st, small_spec_st), min_size=1, max_size=40), sizes_st)
def test_merged_output_holds_exactly_the_input_records_in_order(
    specs: list[Spec], sizes: tuple[int, int]
) -> None:
    threshold, target = sizes
    batches = build(specs)
    out = coalesce(batches, max_bytes=2 * target, threshold=threshold, target=target)
    assert [r for c in out for r in rows(c.batch)] == [r for b in batches for r in rows(b)]
    position = 0
    for c in out:
        assert c.index == position
        run = batches[c.index : c.index + c.sources]
        position += c.sources
        assert (c.first_offset, c.last_offset) == (run[0].base_offset, run[-1].last_offset)
        if not c.merged:
            assert c.batch is run[0]  # passed through: the same bytes
            continue
        # only small, eligible batches without gaps, of one codec and timestamp type, are merged
        assert all(merge_eligible(b) and len(b) < threshold for b in run)
        assert not any(b.is_control or b.is_transactional or b.timestamp_type or b.has_delete_horizon
                       or not b.is_contiguous() for b in run)
        assert all(b.base_offset == a.last_offset + 1 for a, b in itertools.pairwise(run))
        assert len({b.attributes for b in run}) == 1 and c.batch.attributes == run[0].attributes
        assert sum(len(b) for b in run) <= target
        merged = c.batch
        assert merged.crc_ok() and merged.is_contiguous() and len(merged) <= 2 * target
        assert merged.base_offset == c.first_offset and merged.last_offset == c.last_offset
        assert merged.records_count == sum(b.records_count for b in run)
        assert (merged.producer_id, merged.producer_epoch, merged.base_sequence) == (-1, -1, -1)
        ts = [r[1] for r in rows(merged)]
        assert (merged.base_timestamp, merged.max_timestamp) == (min(ts), max(ts))
    assert position == len(batches)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.one_of(spec_st, small_spec_st), min_size=1, max_size=40), sizes_st, st.integers(1, 100))
def test_offset_translation_is_exact_across_merged_batches(
    specs: list[Spec], sizes: tuple[int, int], lag: int
) -> None:
    """The sink's batches (merged, rebuilt, passed through) on a target log, offset syncs as the
    task emits them: every mirrored source offset translates to its record's target offset."""
    batches = [b for b in build(specs) if not b.is_control]  # the fetcher drops control batches
    threshold, target = sizes
    outgoing = prepare(batches, CoalesceSettings(threshold=threshold, target=target))
    planner, store = OffsetSyncPlanner(offset_lag_max=lag), OffsetSyncStore()
    t = 0
    expected: dict[int, int] = {}
    for o in outgoing:
        for sync in planner.on_batch(TP, o.first, o.last, t, o.record_offsets):
            store.add(sync)
        got = rows(o.batch)
        sources = o.record_offsets or list(range(o.first, o.last + 1))
        assert len(sources) == len(got) == o.batch.records_count
        expected.update({s: t + i for i, s in enumerate(sources)})
        t += o.batch.records_count
    for source_offset, target_offset in expected.items():
        assert store.translate(TP, source_offset) == target_offset
    assert [o.source_next for o in outgoing][-1:] == [b.next_offset for b in batches][-1:]


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.one_of(spec_st, small_spec_st), min_size=1, max_size=30), sizes_st)
def test_match_run_recognises_each_written_batch_and_nothing_else(
    specs: list[Spec], sizes: tuple[int, int]
) -> None:
    batches = [b for b in build(specs) if b.is_contiguous()]
    threshold, target = sizes
    for c in coalesce(batches, max_bytes=2 * target, threshold=threshold, target=target):
        # as the target holds it: the mirror's producer fields, baseOffset and CRC
        written = RecordBatch(for_produce(c.batch, 42, 3, 1000))
        assert match_run(written, batches[c.index :]) == c.sources
        if c.merged:
            # one batch later: no match, unless those batches hold the very same records (identical
            # batches one after the other): a target batch is recognised by its content
            k = match_run(written, batches[c.index + 1 :])
            later = [r[1:] for b in batches[c.index + 1 : c.index + 1 + k] for r in rows(b)]
            assert k == 0 or later == [r[1:] for r in rows(c.batch)]
            shorter = coalesce(batches[c.index : c.index + c.sources - 1], max_bytes=2 * target,
                               threshold=threshold, target=target)
            prefix = RecordBatch(for_produce(shorter[0].batch, 42, 3, 1000))
            assert match_run(prefix, batches[c.index :]) == shorter[0].sources
            recs = decode_records(c.batch)
            recs[-1] = Record(recs[-1].offset_delta, recs[-1].timestamp_delta, recs[-1].key,
                              (recs[-1].value or b"") + b"!", recs[-1].headers)
            other = build_batch(recs, codec=c.batch.codec, base_timestamp=c.batch.base_timestamp,
                                max_timestamp=c.batch.max_timestamp)
            assert match_run(RecordBatch(other), batches[c.index :]) == 0


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.one_of(spec_st, small_spec_st), min_size=2, max_size=40), sizes_st, st.data())
def test_cuts_form_the_same_batches_again_from_a_longer_fetch(
    specs: list[Spec], sizes: tuple[int, int], data: st.DataObject
) -> None:
    """A produce failed after a fetch of the first m batches: re-sending from any unacknowledged
    batch with a longer fetch forms exactly the same batches (same records, so same sequences)."""
    batches = build(specs)
    threshold, target = sizes
    m = data.draw(st.integers(1, len(batches)))
    first = coalesce(batches[:m], max_bytes=2 * target, threshold=threshold, target=target)
    k = data.draw(st.integers(0, len(first) - 1))  # the first unacknowledged batch
    unacked = first[k:]
    again = coalesce(batches[unacked[0].index :], max_bytes=2 * target, threshold=threshold,
                     target=target, cuts=[c.last_offset for c in unacked])
    assert _ranges(again[: len(unacked)]) == _ranges(unacked)
    for a, b in zip(again, unacked, strict=False):
        assert rows(a.batch) == rows(b.batch)


def _small_batches(n: int, codec: Codec = Codec.LZ4, start: int = 0) -> list[RecordBatch]:
    """1 KiB-ish producer batches of 4 records each, as a ``linger.ms=0`` producer writes them."""
    rnd = random.Random(start)
    out = []
    for i in range(n):
        recs = [Record(j, j, f"key-{i}-{j}".encode(), rnd.randbytes(200) * 1, ()) for j in range(4)]
        out.append(RecordBatch(build_batch(recs, codec=codec, base_offset=start + 4 * i,
                                           base_timestamp=BASE_TS + i)))
    return out


def test_small_batch_backlog_is_merged_to_the_target_size_and_large_batches_pass_as_they_are() -> None:
    small = _small_batches(400)
    rnd = random.Random(7)
    big_recs = [Record(j, 0, None, rnd.randbytes(1000), ()) for j in range(12)]
    big = RecordBatch(build_batch(big_recs, codec=Codec.LZ4, base_offset=1600, base_timestamp=BASE_TS))
    assert len(big) >= DEFAULT_THRESHOLD and all(len(b) < 2048 for b in small)
    more = _small_batches(1, start=big.next_offset)
    out = coalesce([*small, big, *more], max_bytes=1 << 20)
    merged = [c for c in out if c.merged]
    assert sum(len(c.batch) for c in merged) / len(merged) >= 8 * 1024
    assert all(len(c.batch) <= DEFAULT_TARGET for c in merged)
    assert out[-2].batch is big and out[-1].batch is more[0]  # a lone small batch stays as it is
    assert sum(c.sources for c in merged) == len(small)


def test_corrupt_batch_is_never_merged() -> None:
    batches = _small_batches(5, codec=Codec.NONE)
    data = bytearray(bytes(batches[2]))
    data[-3] ^= 0xFF
    batches[2] = RecordBatch(bytes(data))
    with pytest.raises(CorruptBatchError):
        coalesce(batches, max_bytes=1 << 20)


def test_out_of_order_input_and_bad_sizes_are_refused() -> None:
    batches = _small_batches(3)
    with pytest.raises(ValueError, match="offset order"):
        coalesce([batches[1], batches[0]], max_bytes=1 << 20)
    with pytest.raises(ValueError, match="sizes"):
        coalesce(batches, max_bytes=0)


def test_oversize_merge_is_split_below_max_bytes() -> None:
    batches = _small_batches(40, codec=Codec.NONE)  # ~1.1 KiB each, uncompressed
    out = coalesce(batches, max_bytes=5000, target=1 << 20)
    assert all(len(c.batch) <= 5000 for c in out)
    assert any(c.merged for c in out)
    assert [r for c in out for r in rows(c.batch)] == [r for b in batches for r in rows(b)]


def test_a_merge_that_grows_past_max_bytes_is_split_and_each_half_merged() -> None:
    # records of nothing, 12 per batch, batches 2^55 ms apart: merged, every record's timestamp
    # delta takes 8-9 bytes instead of 1, so six batches' ~950 bytes come out over 1,000
    batches = [
        RecordBatch(build_batch([Record(d, 0, None, b"", ()) for d in range(12)], base_offset=12 * n,
                                base_timestamp=n << 55))
        for n in range(6)
    ]
    assert sum(len(b) for b in batches) <= 1000
    splits = CoalesceCounters.oversize_splits
    out = coalesce(batches, max_bytes=1000)
    assert CoalesceCounters.oversize_splits == splits + 1
    assert [(c.index, c.sources) for c in out] == [(0, 3), (3, 3)]
    assert all(len(c.batch) <= 1000 for c in out)
    assert [r for c in out for r in rows(c.batch)] == [r for b in batches for r in rows(b)]


def test_coalescing_off_passes_every_batch_through() -> None:
    batches = _small_batches(10)
    outgoing = prepare(batches, CoalesceSettings(enabled=False))
    assert [o.batch for o in outgoing] == batches
    assert all(o.batch is b for o, b in zip(outgoing, batches, strict=True))


@pytest.mark.parametrize("kind", ["control", "txn", "logappend", "compacted"])
def test_batches_that_must_keep_their_header_are_never_merged(kind: str) -> None:
    values = (10, 20, 30)
    plain = Spec(0, "plain", Codec.LZ4, values, 0, 7)
    special = Spec(0, kind, Codec.LZ4, values, 0, 7)
    batches = build([plain, plain, special, special, special, plain, plain])
    out = coalesce(batches, max_bytes=1 << 20)
    assert _ranges(out) == [
        (batches[0].base_offset, batches[1].last_offset, 2),
        *((b.base_offset, b.last_offset, 1) for b in batches[2:5]),
        (batches[5].base_offset, batches[6].last_offset, 2),
    ]


@pytest.mark.parametrize(("second", "why"), [
    (Spec(1, "plain", Codec.LZ4, (10, 20), 0, 7), "offset gap"),
    (Spec(0, "plain", Codec.ZSTD, (10, 20), 0, 7), "codec change"),
    (Spec(0, "logappend", Codec.LZ4, (10, 20), 0, 7), "timestamp type change"),
])
def test_a_run_ends_at_a_gap_or_a_change_of_codec_or_timestamp_type(second: Spec, why: str) -> None:
    first = Spec(0, "plain", Codec.LZ4, (10, 20), 0, 7)
    batches = build([first, first, second])
    out = coalesce(batches, max_bytes=1 << 20)
    assert [c.sources for c in out] == [2, 1], why
    assert out[1].batch is batches[2]


def test_batches_of_different_source_producers_are_merged() -> None:
    """The mirror's producer stamps its own producer id on every batch it writes."""
    batches = build([Spec(0, "plain", Codec.LZ4, (10, 20), 0, pid) for pid in (7, 8, -1, 7)])
    assert len({b.producer_id for b in batches}) == 3
    assert [c.sources for c in coalesce(batches, max_bytes=1 << 20)] == [4]


def test_settings_default_on_with_documented_sizes_and_reach_the_sink() -> None:
    from mm2py.config.errors import ConfigError
    from mm2py.config.models import MirrorMakerConfig
    from mm2py.connectors.mirror_task import coalesce_settings

    keys = {"clusters": "a,b", "a.bootstrap.servers": "h:1", "b.bootstrap.servers": "h:2"}
    flow = MirrorMakerConfig.from_flat(keys).flow("a", "b")
    assert coalesce_settings(flow) == CoalesceSettings(True, 8192, 65536, 1 << 20, 0)
    off = MirrorMakerConfig.from_flat({**keys, "a->b.mm2py.coalesce.enabled": "false"}).flow("a", "b")
    assert coalesce_settings(off).enabled is False
    with pytest.raises(ConfigError, match=r"mm2py\.coalesce\.threshold\.bytes"):
        MirrorMakerConfig.from_flat({**keys, "mm2py.coalesce.threshold.bytes": "-1"})
    level = MirrorMakerConfig.from_flat({**keys, "a->b.mm2py.coalesce.lz4.level": "9"}).flow("a", "b")
    assert coalesce_settings(level).lz4_level == 9 and coalesce_settings(flow).lz4_level == 0
    with pytest.raises(ConfigError, match=r"mm2py\.coalesce\.lz4\.level"):
        MirrorMakerConfig.from_flat({**keys, "mm2py.coalesce.lz4.level": "13"})


def test_merged_lz4_batches_follow_the_level_setting() -> None:
    specs = [Spec(0, "plain", Codec.LZ4, (150,) * 4, i, -1) for i in range(40)]
    batches = build(specs)
    fast = coalesce(batches, max_bytes=1 << 20, lz4_level=0)
    high = coalesce(batches, max_bytes=1 << 20, lz4_level=9)
    assert [c.sources for c in fast] == [c.sources for c in high] == [40]
    assert decode_records(fast[0].batch) == decode_records(high[0].batch)
    assert bytes(fast[0].batch.records_view) != bytes(high[0].batch.records_view)
