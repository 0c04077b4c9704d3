"""Checkpoint logic without brokers: translation bound by committed progress, emission and sync rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mm2py.engine.checkpoints import (
    CheckpointLog,
    is_newer,
    offsets_to_sync,
    translate_group,
    translate_offset,
)
from mm2py.engine.offset_syncs import OffsetSyncPlanner, OffsetSyncStore
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.mm2_records import Checkpoint, OffsetSync
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import GroupOffset, GroupState
from tests.support.hypothesis_examples import examples

TP = TopicPartition("orders", 0)


def _store(*syncs: tuple[int, int], tp: TopicPartition = TP) -> OffsetSyncStore:
    store = OffsetSyncStore()
    for u, d in syncs:
        store.add(OffsetSync(tp, u, d))
    return store


# ------------------------------------------------------------------------------ MM2 format


def test_checkpoint_decodes_from_hand_written_mm2_bytes() -> None:
    # key: group "g1" | topic "east.foo" | partition 2; value: version 0 | 100 | 90 | "meta"
    key = bytes.fromhex("0002 6731  0008 656173742e666f6f  00000002")
    value = bytes.fromhex("0000  0000000000000064  000000000000005a  0004 6d657461")
    expected = Checkpoint("g1", TopicPartition("east.foo", 2), 100, 90, "meta")
    assert Checkpoint.from_record(key, value) == expected


# ------------------------------------------------------------------------------ translation


def test_no_progress_or_progress_without_target_offset_gives_no_translation() -> None:
    store = _store((0, 0))
    assert translate_offset(store, TP, 5, None) is None
    assert translate_offset(store, TP, 5, Position(10, None)) is None  # written by MM2: not exact
    assert translate_offset(store, TP, 5, Position(10, 10)) == 5


def test_offset_beyond_the_committed_progress_maps_to_the_progress_target_offset() -> None:
    # source 0..9 mirrored to 0..9, then 10..19 aborted (dropped), 20.. mirrored from target 10;
    # the sync for 20 was flushed but the progress commit (at source 15, target 10) says only this much
    store = _store((0, 0), (20, 10))
    progress = Position(15, 10)
    assert translate_offset(store, TP, 7, progress) == 7
    assert translate_offset(store, TP, 12, progress) == 10  # inside the gap: first offset after it
    assert translate_offset(store, TP, 30, progress) == 10  # not committed yet: re-read, never skip
    assert translate_offset(store, TP, 30, Position(31, 21)) == 20


def test_offset_before_the_first_sync_is_not_translated() -> None:
    store = _store((100, 0))
    assert translate_offset(store, TP, 50, Position(200, 100)) is None


def test_translate_group_keeps_mirrored_topics_renamed_with_metadata() -> None:
    other = TopicPartition("secret", 0)
    store = _store((0, 0))
    store.add(OffsetSync(other, 0, 0))
    offsets = {TP: GroupOffset(4, "m"), other: GroupOffset(3), TopicPartition("orders", 1): GroupOffset(2)}
    progress = {TP: Position(10, 10), other: Position(10, 10)}
    cps = translate_group(
        "g", offsets, mirrored=lambda t: t != "secret", rename=lambda t: f"east.{t}",
        syncs=store, progress=progress,
    )
    # "secret" is not mirrored; orders-1 has no syncs nor progress
    target = TopicPartition("east.orders", 0)
    assert cps == {target: Checkpoint("g", target, 4, 4, "m")}


# ------------------------------------------------------------------------------ emission rule


def _cp(up: int, down: int) -> Checkpoint:
    return Checkpoint("g", TopicPartition("east.orders", 0), up, down)


def test_emission_rule_first_advance_rewind_and_repeats() -> None:
    assert is_newer(_cp(5, 5), None)
    assert not is_newer(_cp(5, 5), _cp(5, 5))  # repeated
    assert is_newer(_cp(6, 6), _cp(5, 5))  # downstream advanced
    assert not is_newer(_cp(7, 4), _cp(5, 5))  # downstream would go back while upstream did not
    assert not is_newer(_cp(8, 5), _cp(5, 5))  # upstream moved, downstream did not (not mirrored yet)
    assert is_newer(_cp(2, 2), _cp(5, 5))  # the source group was reset backwards: follow it


def test_checkpoint_log_keeps_the_latest_per_group_partition() -> None:
    log = CheckpointLog()
    log.add(_cp(5, 5))
    assert log.changed([_cp(5, 5), _cp(6, 6)]) == [_cp(6, 6)]
    log.add(_cp(6, 6))
    assert log.get("g") == {TopicPartition("east.orders", 0): _cp(6, 6)}
    assert log.groups() == ["g"] and log.get("other") == {}


# ------------------------------------------------------------------------------ group sync rule


def test_sync_never_moves_a_target_group_backwards() -> None:
    a, b, c = (TopicPartition("east.orders", p) for p in range(3))
    cps = {
        a: Checkpoint("g", a, 10, 10, "ma"),
        b: Checkpoint("g", b, 10, 10),
        c: Checkpoint("g", c, 10, 10),
    }
    target = {a: GroupOffset(5), b: GroupOffset(10), c: GroupOffset(20)}
    assert offsets_to_sync(cps, target) == {a: GroupOffset(10, "ma")}
    assert offsets_to_sync(cps, {}) == {tp: GroupOffset(10, cps[tp].metadata) for tp in (a, b, c)}


def test_only_groups_without_members_are_inactive() -> None:
    assert GroupState("EMPTY").inactive
    assert GroupState("DEAD").inactive
    assert GroupState("NOT_FOUND").inactive
    assert not GroupState("STABLE", 1).inactive
    assert not GroupState("PREPARING_REBALANCING", 2).inactive
    assert not GroupState("UNKNOWN").inactive


# ------------------------------------------------------------------------------ property


@st.composite
def _mirror_history(draw: st.DrawFn) -> tuple[list[tuple[int, int, bool]], int]:
    """Source batches (first, last, kept?) back to back, and how many were committed."""
    batches = []
    offset = 0
    for _ in range(draw(st.integers(1, 12))):
        size = draw(st.integers(1, 30))
        kept = draw(st.booleans()) or not batches  # aborted/control batches are dropped
        batches.append((offset, offset + size - 1, kept))
        offset += size
    committed = draw(st.integers(1, len(batches)))
    return batches, committed


@settings(max_examples=examples(300), deadline=None)
@given(_mirror_history(), st.integers(0, 40), st.data())
def test_translation_is_exact_below_progress_and_never_ahead(
    history: tuple[list[tuple[int, int, bool]], int], lag_max: int, data: st.DataObject
) -> None:
    batches, committed = history
    planner = OffsetSyncPlanner(offset_lag_max=max(1, lag_max))
    store = OffsetSyncStore()
    kept_offsets: list[int] = []
    progress = None
    # syncs of later batches may be flushed before their progress commit: include a few of them
    flushed = committed + data.draw(st.integers(0, len(batches) - committed))
    for i, (first, last, kept) in enumerate(batches):
        if kept:
            for sync in planner.on_batch(TP, first, last, len(kept_offsets)):
                if i < flushed:
                    store.add(sync)
            kept_offsets.extend(range(first, last + 1))
        if i == committed - 1:
            progress = Position(last + 1, len(kept_offsets))
    assert progress is not None

    def exact(u: int) -> int:  # the target offset of the first kept record at or after u
        return sum(1 for o in kept_offsets if o < u)

    first_synced = min(u for u, _ in store.syncs(TP))
    for u in range(first_synced, batches[-1][1] + 3):
        got = translate_offset(store, TP, u, progress)
        assert got is not None
        assert got == exact(min(u, progress.source)), (u, progress, store.syncs(TP))
        assert got <= exact(u)  # a consumer starting there never skips a record
