"""Offset-sync emission and translation: exact for every mirrored position (property test)."""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from mm2py.engine.offset_syncs import OffsetSyncPlanner, OffsetSyncStore
from mm2py.protocol.types import TopicPartition
from tests.support.hypothesis_examples import examples

TP = TopicPartition("orders", 3)

# one mirrored batch: (gap before it, records in it, kept-offset stride pattern or None)
batch_st = st.tuples(
    st.integers(0, 5),  # source offsets skipped before this batch (aborted txn, control batch)
    st.integers(1, 300),  # source span of the batch
    st.one_of(st.none(), st.lists(st.booleans(), min_size=1, max_size=40)),  # compaction mask
)


def _simulate(batches: list[tuple[int, int, list[bool] | None]], lag: int):
    planner = OffsetSyncPlanner(offset_lag_max=lag)
    store = OffsetSyncStore()
    mirrored: list[tuple[int, int]] = []  # (source offset, target offset) of every record
    s, t = 0, 0
    for gap, span, mask in batches:
        s += gap
        if mask is None:
            offsets = list(range(s, s + span))
            syncs = planner.on_batch(TP, s, s + span - 1, t)
        else:
            kept = [s + i for i, keep in enumerate(mask) if keep] or [s]
            span = len(mask)
            offsets = kept
            syncs = planner.on_batch(TP, kept[0], kept[-1], t, record_offsets=kept)
        for sync in syncs:
            store.add(sync)
        mirrored.extend((o, t + i) for i, o in enumerate(offsets))
        t += len(offsets)
        s += span
    return store, mirrored, s, t


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=25), st.integers(1, 150))
def test_translation_is_exact_for_every_mirrored_position(batches, lag) -> None:
    store, mirrored, source_end, target_end = _simulate(batches, lag)
    sources = [m[0] for m in mirrored]
    first = sources[0]
    for u in range(first, source_end + 1):
        # the consumer's next record is the first mirrored one at or after u
        i = bisect.bisect_left(sources, u)
        want = mirrored[i][1] if i < len(mirrored) else target_end
        assert store.translate(TP, u, downstream_end=target_end) == want, u


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=25), st.integers(1, 150))
def test_syncs_are_sparse_in_steady_state(batches, lag) -> None:
    planner = OffsetSyncPlanner(offset_lag_max=lag)
    # contiguous batches, no gaps: one sync per offset.lag.max records at most (+ the first)
    s = 0
    count = 0
    for _, span, _ in batches:
        count += len(planner.on_batch(TP, s, s + span - 1, s + 1000))
        s += span
    assert count <= 1 + s // lag


def test_translation_before_first_sync_is_unknown() -> None:
    store = OffsetSyncStore()
    planner = OffsetSyncPlanner(offset_lag_max=100)
    for sync in planner.on_batch(TP, 500, 509, 0):
        store.add(sync)
    assert store.translate(TP, 499) is None
    assert store.translate(TP, 500) == 0
    assert store.translate(TopicPartition("other", 0), 500) is None


def test_restart_rewrites_newer_syncs() -> None:
    store = OffsetSyncStore()
    planner = OffsetSyncPlanner(offset_lag_max=10)
    for sync in planner.on_batch(TP, 0, 49, 0):
        store.add(sync)
    # worker restarted from source 20, which now lands at target 50 (duplicates of 20..49 before)
    planner.reset(TP)
    for sync in planner.on_batch(TP, 20, 49, 50):
        store.add(sync)
    assert store.translate(TP, 25) == 55
    assert store.translate(TP, 10) == 10


def _mm2_translate(syncs: list[tuple[int, int]], u: int) -> int | None:
    """MirrorMaker 2's reader rule (OffsetSyncStore): nearest sync at or below, +1 unless exact."""
    older = [s for s in syncs if s[0] <= u]
    if not older:
        return None
    up, down = older[-1]
    return down + (0 if up == u else 1)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=25), st.integers(1, 150))
def test_mm2_reading_our_syncs_never_skips_a_record(batches, lag) -> None:
    store, mirrored, source_end, target_end = _simulate(batches, lag)
    syncs = store.syncs(TP)
    sources = [m[0] for m in mirrored]
    for u in range(sources[0], source_end + 1):
        i = bisect.bisect_left(sources, u)
        exact = mirrored[i][1] if i < len(mirrored) else target_end
        theirs = _mm2_translate(syncs, u)
        assert theirs is not None and theirs <= exact, u  # may re-read, never skips
        if any(s[0] == u for s in syncs):
            assert theirs == exact, u  # at a sync, MM2's answer is exact too
