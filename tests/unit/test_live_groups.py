"""The live group sync's pure rules: which commits wait, when they translate exactly, from which view."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mm2py.engine.checkpoints import translate_offset
from mm2py.engine.live_groups import AcknowledgedView, LiveGroups, TopicsView, as_fetched, exact_translation
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.engine.task_contract import Delivered
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.consumer_offsets import CommittedOffset, GroupRecord, OffsetCommit, OtherRecord
from mm2py.protocol.mm2_records import Checkpoint, OffsetSync
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin_types import GroupOffset
from tests.support.hypothesis_examples import examples

TP = TopicPartition("orders", 0)
TARGET = TopicPartition("east.orders", 0)


def _live(patience: float = 60.0) -> LiveGroups:
    return LiveGroups(selects=lambda g: g.startswith("app-"), mirrored=lambda t: t == "orders",
                      rename=lambda t: f"east.{t}", patience=patience)


def _commit(group: str, offset: int | None, tp: TopicPartition = TP, ts: int = 1000) -> OffsetCommit:
    return OffsetCommit(group, tp, None if offset is None else CommittedOffset(offset, "m", ts))


def _view(position: tuple[int, int] | None, *syncs: tuple[int, int]) -> TopicsView:
    store = OffsetSyncStore()
    for u, d in syncs:
        store.add(OffsetSync(TP, u, d))
    return TopicsView(store, {} if position is None else {TP: Position(*position)})


def test_a_commit_waits_until_the_mirror_has_passed_it_then_translates_exactly() -> None:
    live = _live()
    assert live.offer(_commit("app-1", 40), now=0.0) == "app-1"  # a group not seen before
    # a control record at source offset 20 was dropped: from there target = source - 1
    behind = _view((30, 29), (0, 0), (21, 20))
    assert live.ready([behind], now=0.1) == [] and len(live.pending) == 1
    passed = _view((45, 44), (0, 0), (21, 20))
    [(cp, change)] = live.ready([passed], now=0.2)
    assert cp == Checkpoint("app-1", TARGET, 40, 39, "m")
    assert (change.commit_ms, change.seen) == (1000, 0.0) and not live.pending


def test_the_first_view_that_knows_wins_and_a_later_one_fills_in() -> None:
    live = _live()
    live.offer(_commit("app-1", 40), now=0.0)
    no_syncs = _view((50, 50))  # the in-process view after its syncs were dropped: no answer
    topics = _view((45, 45), (0, 0))
    [(cp, _)] = live.ready([no_syncs, topics], now=0.0)
    assert cp.downstream_offset == 40


def test_only_selected_groups_and_mirrored_topics_wait() -> None:
    live = _live()
    assert live.offer(_commit("other", 5), now=0.0) is None
    assert live.offer(_commit("app-1", 5, TopicPartition("not-mirrored", 0)), now=0.0) == "app-1"
    assert live.offer(OtherRecord(4), now=0.0) is None
    assert live.offer(_commit("app-1", -1), now=0.0) is None  # no offset: nothing to translate
    assert not live.pending and live.groups == {"app-1"}


def test_a_later_commit_replaces_the_waiting_one_and_tombstones_cancel() -> None:
    live = _live()
    live.offer(_commit("app-1", 5), now=0.0)
    live.offer(_commit("app-1", 9), now=1.0)
    assert [c.offset.offset for c in live.pending.values()] == [9]
    live.offer(_commit("app-1", None), now=2.0)  # the offset was deleted
    assert not live.pending
    live.offer(_commit("app-1", 9), now=3.0)
    live.offer(GroupRecord("app-1", deleted=False), now=3.0)  # a rebalance: nothing changes
    assert live.pending
    live.offer(GroupRecord("app-1", deleted=True), now=4.0)  # the group is gone
    assert not live.pending and not live.groups


def test_commits_that_cannot_become_exact_are_left_to_the_periodic_round() -> None:
    live = _live(patience=5.0)
    live.offer(_commit("app-1", 40), now=0.0)
    assert live.ready([_view((10, 10), (0, 0))], now=4.0) == [] and live.pending
    assert live.newest_wait() == 0.0 and live.waiting_since() == 0.0
    assert live.ready([_view((10, 10), (0, 0))], now=6.0) == [] and not live.pending
    assert live.given_up == 1 and live.newest_wait() is None


def test_polled_offsets_count_what_changed_since_the_last_poll() -> None:
    live = _live()
    offsets = {TP: GroupOffset(5), TopicPartition("orders", 1): GroupOffset(7)}
    assert live.offer_offsets("app-1", offsets, now=0.0, wall_ms=10) is True
    assert len(live.pending) == 2
    live.pending.clear()
    assert live.offer_offsets("app-1", offsets, now=1.0, wall_ms=20) is False
    assert not live.pending  # nothing moved
    live.offer_offsets("app-1", {**offsets, TP: GroupOffset(6)}, now=2.0, wall_ms=30)
    assert [(k, c.offset.offset, c.commit_ms) for k, c in live.pending.items()] == [(("app-1", TP), 6, 30)]
    assert live.offer_offsets("nope", offsets, now=3.0, wall_ms=40) is False


def test_the_acknowledged_view_is_the_tasks_batches_and_syncs() -> None:
    view = AcknowledgedView(max_per_partition=2)
    assert view.snapshot().exact(TP, 0) is None  # nothing acknowledged yet
    # source 0-9 at target 0-9, a control record at 10, 11-19 at 10-18, 20-29 at 19-28 (merged)
    view.delivered([Delivered(TP, 0, 9, 10, 0, records=10), Delivered(TP, 11, 19, 20, 10, records=9)])
    view.add_syncs([OffsetSync(TP, 0, 0), OffsetSync(TP, 11, 10)])
    view.delivered([Delivered(TP, 20, 29, 30, 19, records=10)])
    assert view.positions == {TP: Position(30, 29)}
    snap = view.snapshot()
    assert [snap.exact(TP, u) for u in (5, 10, 11, 25, 30)] == [5, 10, 10, 24, 29]
    assert snap.exact(TP, 31) is None  # not mirrored yet
    view.add_syncs([OffsetSync(TP, 20, 19)])  # a third: the oldest goes
    assert snap.exact(TP, 5) is None  # its sync no longer held: another view must answer


@settings(max_examples=examples(200))
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3)), min_size=1, max_size=8),
       st.integers(0, 400), st.integers(0, 400))
def test_exact_translation_is_the_checkpoint_translation_below_the_position(
    gaps: list[tuple[int, int]], position: int, upstream: int
) -> None:
    store, u, d = OffsetSyncStore(), 0, 0
    for run, skipped in gaps:  # runs of records, each followed by offsets the target does not have
        store.add(OffsetSync(TP, u, d))
        u, d = u + run + skipped, d + run
    target_end = d if position >= u else None
    progress = Position(position, target_end if target_end is not None else translate_offset(
        store, TP, position, Position(position, 10**9)) or 0)
    got = exact_translation(store, TP, upstream, progress)
    if upstream > position:
        assert got is None
    else:
        assert got == translate_offset(store, TP, upstream, progress)


def test_metadata_is_what_offset_fetch_reads() -> None:
    # a librdkafka client commits "meta" as b"meta\0"; OffsetFetch through librdkafka reads "meta"
    live = _live()
    live.offer(OffsetCommit("app-1", TP, CommittedOffset(5, "meta\x00", 1)), now=0.0)
    assert [c.offset for c in live.pending.values()] == [GroupOffset(5, "meta")]
    assert as_fetched("") == "" and as_fetched("a\x00b") == "a" and as_fetched("plain") == "plain"
