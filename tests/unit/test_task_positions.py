"""engine/task_positions: a task's positions per partition and the rules that move them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mm2py.engine.task_positions import TaskPositions
from mm2py.protocol.types import TopicPartition

TP = TopicPartition("orders", 0)


def started(at: int = 10, target: int | None = 100) -> TaskPositions:
    pos = TaskPositions()
    pos.start(TP, at, target, "id-1")
    return pos


def test_a_started_partition_is_fetched_from_its_acknowledged_position() -> None:
    pos = started()
    assert pos.fetch_of(TP) == 10 and pos.acked[TP] == 10
    assert (pos.target_next[TP], pos.topic_ids[TP]) == (100, "id-1")
    assert pos.wanted(None) == {TP: 10}
    assert pos.wanted({TP: 10}) == {} and pos.wanted({TP: 11}) == {TP: 10}


def test_a_filtered_stretch_counts_once_everything_before_it_is_acknowledged() -> None:
    pos = started()
    assert pos.fetched(TP, 20) == 20  # batches 10..19 handed over
    pos.skip_filtered(TP, 25)  # 20..24 aborted: the sink gets nothing
    assert (pos.fetch_of(TP), pos.acked[TP]) == (25, 10)  # 10..19 not acknowledged yet
    pos.pass_filtered(TP, 20, 25)  # the round's put ended in the stretch: nothing until 20 is
    assert pos.acked[TP] == 10
    assert pos.acknowledge(TP, 20, 100, 10) == 100  # expected where the last batch ended
    pos.pass_filtered(TP, 20, 25)
    assert pos.acked[TP] == 25 and pos.target_next[TP] == 110


def test_filtered_batches_with_nothing_pending_are_acknowledged_at_once() -> None:
    pos = started()
    pos.skip_filtered(TP, 30)
    assert (pos.fetch_of(TP), pos.acked[TP]) == (30, 30)
    pos.skip_filtered(TP, 25)  # an older answer never moves a position back
    assert (pos.fetch_of(TP), pos.acked[TP]) == (30, 30)


def test_a_reset_moves_both_positions_and_a_rewind_fetches_from_the_acknowledged_one() -> None:
    pos = started()
    pos.fetched(TP, 40)
    assert pos.reset(TP, 40, "id-2") is True
    assert (pos.acked[TP], pos.target_next[TP], pos.topic_ids[TP]) == (40, 100, "id-2")
    assert pos.reset(TP, 40, None) is False
    pos.fetched(TP, 60)
    pos.rewind()
    assert pos.fetch_of(TP) == 40
    pos.learn_topic_id(TP, "id-3")  # known already: kept
    assert pos.topic_ids[TP] == "id-2"
    pos.drop(TP)
    assert TP not in pos and len(pos) == 0 and pos.wanted(None) == {}


steps = st.lists(st.tuples(st.sampled_from(["fetched", "filtered", "ack", "rewind", "reset"]),
                           st.integers(0, 20)), max_size=40)


@given(steps)
def test_the_acknowledged_position_never_passes_the_fetch_position(ops: list[tuple[str, int]]) -> None:
    """ACKED_BEHIND_FETCH over any order of the moves a task makes (acknowledgements only of what
    was handed over, as the sink gives them)."""
    pos = started(0, 0)
    handed: list[int] = []  # ends of batches handed over and not yet acknowledged
    for op, n in ops:
        fetch = pos.fetch_of(TP)
        if op == "fetched" and n:
            handed.append(pos.fetched(TP, fetch + n))
        elif op == "filtered":
            pos.skip_filtered(TP, fetch + n)
        elif op == "ack" and handed:
            pos.acknowledge(TP, handed.pop(0), 0, 1)
        elif op == "rewind":
            pos.rewind()
            handed.clear()
        elif op == "reset" and not handed:
            pos.reset(TP, fetch + n, None)
        assert pos.acked[TP] <= pos.fetch_of(TP)
