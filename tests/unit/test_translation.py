"""Two-way exact translation (engine/translation.py): forward then back returns every source offset
holding a record, and a consumer resuming at a translated position, either way, neither re-reads nor
skips — over random gap patterns (aborted transactions, markers, compaction), syncs written past the
committed position, and a bounded sync store that forgot its oldest syncs."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mm2py.engine.offset_syncs import OffsetSyncPlanner, OffsetSyncStore
from mm2py.engine.translation import (
    BeforeSyncsError,
    BeyondMirroredError,
    Direction,
    NotMirroredError,
    PartitionMap,
)
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition
from tests.support.hypothesis_examples import examples

TP = TopicPartition("orders", 3)

# one mirrored batch: (gap before it, source span, compaction mask or None)
batch_st = st.tuples(
    st.integers(0, 5),  # offsets the mirror never writes: aborted records, transaction markers
    st.integers(1, 60),
    st.one_of(st.none(), st.lists(st.booleans(), min_size=1, max_size=30)),  # compaction: kept records
)


@dataclass
class Mirrored:
    store: OffsetSyncStore
    records: list[tuple[int, int]]  # (source offset, target offset) of every record below P
    position: Position  # (P, T)


def _mirror(batches: list[tuple[int, int, list[bool] | None]], lag: int, committed: int, tail_gap: int,
            keep: int = 100_000) -> Mirrored:
    """Mirror ``batches`` with the real planner; the flow commits after the first ``committed`` of
    them (plus ``tail_gap`` skipped offsets after it); the later ones' syncs are flushed anyway."""
    planner, store = OffsetSyncPlanner(offset_lag_max=lag), OffsetSyncStore(max_per_partition=keep)
    records: list[tuple[int, int]] = []
    s = t = 0
    position = Position(0, 0)
    for n, (gap, span, mask) in enumerate(batches):
        if n == committed:
            position = Position(s + min(gap, tail_gap), t)
        s += gap
        offsets = list(range(s, s + span)) if mask is None else (
            [s + i for i, k in enumerate(mask) if k] or [s])
        span = span if mask is None else len(mask)
        for sync in planner.on_batch(TP, offsets[0], offsets[-1], t,
                                     None if mask is None else offsets):
            store.add(sync)
        if n < committed:
            records.extend((o, t + i) for i, o in enumerate(offsets))
        t += len(offsets)
        s += span
    if committed >= len(batches):
        position = Position(s + tail_gap, t)
    return Mirrored(store, records, position)


mirrors = st.builds(
    lambda batches, lag, frac, tail, keep: _mirror(batches, lag, max(1, round(frac * len(batches))), tail,
                                                   keep),
    st.lists(batch_st, min_size=1, max_size=20), st.integers(1, 120), st.floats(0, 1), st.integers(0, 4),
    st.one_of(st.just(100_000), st.integers(1, 8)),
)


def _map(m: Mirrored) -> PartitionMap:
    return PartitionMap.of(TP, m.store.syncs(TP), m.position)


@settings(max_examples=examples(200), deadline=None)
@given(mirrors)
def test_forward_then_back_returns_every_source_offset_holding_a_record(m: Mirrored) -> None:
    pm = _map(m)
    oldest = pm.upstream[0] if pm.upstream else m.position.source
    for s, t in m.records:
        if s < oldest:
            continue
        assert pm.forward(s) == t, s
        assert pm.back(t) == s, t


@settings(max_examples=examples(200), deadline=None)
@given(mirrors)
def test_a_consumer_resuming_either_way_neither_rereads_nor_skips(m: Mirrored) -> None:
    pm = _map(m)
    p, t_end = m.position.source, m.position.target
    assert t_end is not None
    u0 = pm.upstream[0] if pm.upstream else p
    d0 = pm.downstream[0] if pm.downstream else t_end
    for u in range(u0, p + 1):  # every source position from the oldest known sync to P
        d = pm.forward(u)
        # on the target it reads exactly the records at or after u on the source
        assert [s for s, t in m.records if t >= d] == [s for s, _ in m.records if s >= u], u
        assert d0 <= d <= t_end
    for d in range(d0, t_end + 1):  # every target position from the oldest known sync to T
        u = pm.back(d)
        assert [s for s, _ in m.records if s >= u] == [s for s, t in m.records if t >= d], d
        assert u0 <= u <= p  # never past the source's mirrored end: no negative lag
        assert pm.forward(u) == d  # and back again


@settings(max_examples=examples(100), deadline=None)
@given(mirrors, st.integers(1, 50))
def test_offsets_outside_what_is_known_are_refused(m: Mirrored, by: int) -> None:
    pm = _map(m)
    p, t_end = m.position.source, m.position.target
    assert t_end is not None
    with pytest.raises(BeyondMirroredError):
        pm.forward(p + by)
    with pytest.raises(BeyondMirroredError):
        pm.back(t_end + by)
    if pm.upstream and pm.upstream[0] - by >= 0:
        with pytest.raises(BeforeSyncsError, match="oldest offset sync"):
            pm.forward(pm.upstream[0] - by)
    if pm.downstream and pm.downstream[0] - by >= 0:
        with pytest.raises(BeforeSyncsError):
            pm.back(pm.downstream[0] - by)


def test_transactions_example() -> None:
    # source: 0-4 plain, 5-8 aborted, 9 abort marker, 10-12 committed, 13 commit marker, 14-15 plain
    planner, store = OffsetSyncPlanner(offset_lag_max=100), OffsetSyncStore()
    for first, last, target in ((0, 4, 0), (10, 12, 5), (14, 15, 8)):
        for sync in planner.on_batch(TP, first, last, target):
            store.add(sync)
    pm = PartitionMap.of(TP, store.syncs(TP), Position(16, 10))
    assert [pm.forward(u) for u in range(16)] == [0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 6, 7, 8, 8, 9]
    assert [pm.back(d) for d in range(11)] == [0, 1, 2, 3, 4, 10, 11, 12, 14, 15, 16]
    assert pm.translate(16, Direction.FORWARD) == 10 and pm.translate(10, Direction.BACK) == 16


def test_positions_without_a_target_offset_or_syncs() -> None:
    with pytest.raises(NotMirroredError, match="no committed position"):
        PartitionMap.of(TP, [(0, 0)], None)
    with pytest.raises(NotMirroredError, match="MirrorMaker 2"):
        PartitionMap.of(TP, [(0, 0)], Position(10))
    # nothing mirrored yet (a fresh partition's seed): only the ends translate
    pm = PartitionMap.of(TP, [], Position(42, 7))
    assert pm.forward(42) == 7 and pm.back(7) == 42
    with pytest.raises(NotMirroredError, match="no offset sync"):
        pm.forward(41)


def test_syncs_of_an_earlier_target_partition_are_not_used() -> None:
    # the target partition was deleted and created again: downstream offsets start over
    syncs = [(0, 0), (50, 50), (100, 0), (150, 50)]
    pm = PartitionMap.of(TP, syncs, Position(200, 100))
    assert pm.upstream == (100, 150) and pm.back(10) == 110 and pm.forward(160) == 60
    with pytest.raises(BeforeSyncsError):
        pm.forward(60)
