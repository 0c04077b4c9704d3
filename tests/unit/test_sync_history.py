"""The sync history (engine/sync_history.py): exact translation at any lag after compaction left one
sync per partition on the MM2-format topic; its fold equal over a compacted topic and a whole one;
pruning that keeps every offset from the source's log start translatable; run syncs marked by the
planner; the record's codec; the flow runners' pruning job (both runtimes)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mm2py.config.models import MirrorMakerConfig
from mm2py.engine.offset_syncs import OffsetSyncPlanner, OffsetSyncStore, RunSync
from mm2py.engine.sync_history import SyncHistory, merged
from mm2py.engine.translation import BeforeSyncsError, PartitionMap
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.mm2_records import HistorySync, MalformedRecordError, OffsetSync
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.flows import FIRST_PRUNE_DELAY, FlowRunnerBase
from tests.support.hypothesis_examples import examples

TP = TopicPartition("orders", 3)

# one mirrored batch: (offsets skipped before it: aborted records, markers; its span; compaction
# mask: which of its records survived on the source, or None)
batch_st = st.tuples(st.integers(0, 4), st.integers(1, 40),
                     st.one_of(st.none(), st.lists(st.booleans(), min_size=1, max_size=20)))


def _mirror(batches: list[tuple[int, int, list[bool] | None]], lag: int
            ) -> tuple[list[OffsetSync], list[tuple[int, int]], Position]:
    """The syncs the real planner emits for ``batches`` (in order), every record's (source, target)
    offsets, and the committed position after the last batch."""
    planner = OffsetSyncPlanner(offset_lag_max=lag)
    syncs: list[OffsetSync] = []
    records: list[tuple[int, int]] = []
    s = t = 0
    for gap, span, mask in batches:
        s += gap
        offsets = list(range(s, s + span)) if mask is None else (
            [s + i for i, k in enumerate(mask) if k] or [s])
        span = span if mask is None else len(mask)
        syncs += planner.on_batch(TP, offsets[0], offsets[-1], t, None if mask is None else offsets)
        records += [(o, t + i) for i, o in enumerate(offsets)]
        t += len(offsets)
        s += span
    return syncs, records, Position(s, t)


def _compacted(records: list[HistorySync], drop_tombstones: bool) -> list[HistorySync]:
    """What compaction leaves of a topic: the last record of each key, in topic order."""
    last = {r.key_bytes(): i for i, r in enumerate(records)}
    kept = [r for i, r in enumerate(records) if last[r.key_bytes()] == i]
    return [r for r in kept if not (drop_tombstones and r.downstream_offset is None)]


def _history(records: list[HistorySync]) -> SyncHistory:
    history = SyncHistory()
    for r in records:
        history.add(r)
    return history


def _translating_map(syncs: list[OffsetSync], position: Position, pruned_below: int | None = None
                     ) -> tuple[PartitionMap, PartitionMap]:
    """(the map from the MM2-format topic once compacted, the map from the history and that topic),
    the history pruned for a source log start ``pruned_below``."""
    mm2 = OffsetSyncStore()
    mm2.add(syncs[-1])  # compaction, one key per partition: the newest sync is all that is left
    records = [HistorySync.of(s) for s in syncs if isinstance(s, RunSync)]
    history = _history(_compacted(records, drop_tombstones=False))
    if pruned_below is not None:
        for u in history.obsolete(TP, pruned_below):
            history.add(HistorySync(TP, u, None))
    both = merged(history.syncs(TP), mm2.syncs(TP))
    return PartitionMap.of(TP, mm2.syncs(TP), position), PartitionMap.of(TP, both, position)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(batch_st, min_size=2, max_size=25), st.integers(1, 30))
def test_every_position_translates_exactly_after_compaction(batches: list[tuple[int, int, list[bool] | None]],
                                                            lag: int) -> None:
    syncs, records, position = _mirror(batches, lag)
    mm2_only, pm = _translating_map(syncs, position)
    for s, t in records:  # every record, however far behind: forward and back
        assert pm.forward(s) == t, s
        assert pm.back(t) == s, t
    first = records[0][0]
    for u in range(first, position.source + 1):  # a consumer at any position reads what it had not
        d = pm.forward(u)
        assert [x for x, y in records if y >= d] == [x for x, _ in records if x >= u], u
        assert d <= position.target  # never past what was mirrored: no negative lag
    if syncs[-1].upstream_offset > first:  # without the history the oldest positions are lost
        with pytest.raises(BeforeSyncsError):
            mm2_only.forward(first)
    # the checkpoint connector's store: what it read of the offset-syncs topic, the history behind it
    history = _history([HistorySync.of(s) for s in syncs if isinstance(s, RunSync)])
    store = OffsetSyncStore(older=history.syncs)
    store.add(syncs[-1])
    for u in range(first, position.source + 1):
        assert store.translate(TP, u, position.target) == pm.forward(u), u


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(batch_st, min_size=2, max_size=25), st.integers(1, 30), st.floats(0, 1))
def test_pruning_keeps_every_offset_from_the_log_start(batches: list[tuple[int, int, list[bool] | None]],
                                                       lag: int, where: float) -> None:
    syncs, records, position = _mirror(batches, lag)
    log_start = round(where * position.source)
    _, pm = _translating_map(syncs, position, pruned_below=log_start)
    for s, t in records:
        if s >= log_start:
            assert pm.forward(s) == t and pm.back(t) == s, s
    runs = sum(isinstance(s, RunSync) for s in syncs)
    assert len(pm.upstream) <= runs + 1  # the run syncs and the offset-syncs topic's newest


# a step of a history topic's life: a sync written (upstream, downstream), or a pruning pass for a
# source log start (None: stale points only), which tombstones what the pruner's fold finds obsolete
step_st = st.one_of(st.tuples(st.just("sync"), st.integers(0, 30), st.integers(0, 1000)),
                    st.tuples(st.just("prune"), st.one_of(st.none(), st.integers(0, 30)), st.just(0)))


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(step_st, max_size=40), st.booleans())
def test_the_fold_of_a_compacted_topic_equals_the_fold_of_the_whole(
        steps: list[tuple[str, int | None, int]], drop_tombstones: bool) -> None:
    records: list[HistorySync] = []
    for kind, a, b in steps:
        if kind == "sync":
            assert a is not None
            records.append(HistorySync(TP, a, b))
        else:
            records += [HistorySync(TP, u, None) for u in _history(records).obsolete(TP, a)]
    whole, compacted = _history(records), _history(_compacted(records, drop_tombstones))
    assert compacted.syncs(TP) == whole.syncs(TP)


def test_points_after_a_reset_are_stale_and_pruned() -> None:
    # mirrored to 300, then the flow's position was moved back to 150 and it mirrored on
    history = _history([HistorySync(TP, u, d) for u, d in ((0, 0), (100, 90), (200, 180), (300, 270),
                                                            (150, 400), (250, 495))])
    assert history.syncs(TP) == [(0, 0), (100, 90), (150, 400), (250, 495)]
    assert history.obsolete(TP, None) == [200, 300]  # stale: tombstoned whatever the log start
    assert history.obsolete(TP, 120) == [0, 200, 300]  # and what precedes the log start's point
    assert history.obsolete(TP, 100) == [0, 200, 300]
    assert history.obsolete(TP, 99) == [200, 300]
    for u in (0, 200, 300):
        history.add(HistorySync(TP, u, None))
    assert history.syncs(TP) == [(100, 90), (150, 400), (250, 495)] and history.obsolete(TP, 120) == []
    assert history.size() == 3


def test_merged_lets_the_offset_syncs_topic_fill_in() -> None:
    history = [(100, 90), (200, 185)]
    older = [(0, 0), (150, 140), (200, 999), (300, 285)]  # 200: the history's point wins
    assert merged(history, older) == [(0, 0), (100, 90), (150, 140), (200, 185), (300, 285)]
    assert merged([], older) == older


def test_the_planner_marks_run_syncs() -> None:
    planner = OffsetSyncPlanner(offset_lag_max=10)
    first = planner.on_batch(TP, 0, 24, 0)  # the first record, then every 10 offsets (rule 3)
    assert [(type(s), s.upstream_offset) for s in first] == [(RunSync, 0), (OffsetSync, 10), (OffsetSync, 20)]
    after_gap = planner.on_batch(TP, 30, 31, 25)  # 25-29 skipped: D - U changes
    assert [(type(s), s.upstream_offset, s.downstream_offset) for s in after_gap] == [(RunSync, 30, 25)]
    planner.reset(TP)  # a restart: the first sync after it starts a run whatever its distance
    assert [type(s) for s in planner.on_batch(TP, 32, 32, 27)] == [RunSync]


def test_history_record_codec() -> None:
    sync = HistorySync(TP, 42, 17)
    assert HistorySync.from_record(sync.key_bytes(), sync.value_bytes()) == sync
    assert sync.value_bytes() == OffsetSync(TP, 42, 17).value_bytes()  # MM2's value layout
    assert sync.key_bytes() != HistorySync(TP, 43, 17).key_bytes()  # one key per upstream offset
    tombstone = HistorySync(TP, 42, None)
    assert tombstone.value_bytes() is None and tombstone.sync is None
    assert HistorySync.from_record(sync.key_bytes(), None) == tombstone
    with pytest.raises(MalformedRecordError, match="differs"):
        HistorySync.from_record(sync.key_bytes(), OffsetSync(TP, 41, 17).value_bytes())
    with pytest.raises(MalformedRecordError):
        HistorySync.from_record(None, sync.value_bytes())


def _runner(runtime: str, **settings: str) -> FlowRunnerBase[Any]:
    """A flow runner of ``runtime`` for east->west (no broker is reached before its start)."""
    from mm2py.runtime.inprocess import FlowRunner
    from mm2py.runtime.spark.driver.flow_runner import SparkFlowRunner

    config = MirrorMakerConfig.from_flat({"clusters": "east,west", "east.bootstrap.servers": "e:1",
                                          "west.bootstrap.servers": "w:1", **settings})
    flow = config.flow("east", "west")
    return FlowRunner(flow) if runtime == "in-process" else SparkFlowRunner(flow)


@pytest.mark.parametrize("runtime", ["in-process", "spark"])
@pytest.mark.parametrize(("interval", "first"), [(120, FIRST_PRUNE_DELAY), (10, 10)])
def test_the_flow_prunes_its_history_soon_after_its_start_then_every_interval(
    runtime: str, interval: int, first: float
) -> None:
    runner = _runner(runtime, **{"refresh.topics.enabled": "false",
                                 "mm2py.offset.sync.history.prune.interval.seconds": str(interval)})
    pruned: list[float] = []
    now = [0.0]

    async def prune() -> None:
        pruned.append(now[0])

    runner._prune_history = prune  # type: ignore[method-assign]
    jobs = runner._flow_jobs(clock=lambda: now[0])
    assert jobs.jobs == ["prune sync history"]

    async def at(t: float) -> float | None:
        now[0] = t
        return await jobs.run_due()

    async def life() -> None:
        assert await at(0) == first and pruned == []  # not amid the start's own work
        assert await at(first) == interval and pruned == [first]
        assert await at(first + interval - 1) == 1 and pruned == [first]
        assert await at(first + interval) == interval and pruned == [first, first + interval]

    asyncio.run(life())


@pytest.mark.parametrize("runtime", ["in-process", "spark"])
@pytest.mark.parametrize("off", ["mm2py.offset.sync.history.enabled", "emit.offset-syncs.enabled"])
def test_no_pruning_without_a_history(runtime: str, off: str) -> None:
    on = _runner(runtime)
    assert on._flow_jobs().jobs == ["refresh topics", "prune sync history"]
    assert _runner(runtime, **{off: "false"})._flow_jobs().jobs == ["refresh topics"]
