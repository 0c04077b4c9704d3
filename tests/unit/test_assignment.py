from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mm2py.engine.assignment import assign, count_moves, task_of
from mm2py.protocol.types import TopicPartition
from tests.support.hypothesis_examples import examples

_tp = st.builds(TopicPartition, st.sampled_from(["a", "b", "c", "orders"]), st.integers(0, 11))
_tps = st.lists(_tp, max_size=40)


def _check_invariants(
    result: dict[int, list[TopicPartition]], parts: list[TopicPartition], tmax: int
) -> None:
    unique = set(parts)
    if not unique:
        assert result == {}
        return
    n = min(tmax, len(unique))
    assert sorted(result) == list(range(n))
    counts = Counter(tp for tps in result.values() for tp in tps)
    assert set(counts) == unique, "every partition assigned"
    assert all(c == 1 for c in counts.values()), "exactly once"
    loads = [len(v) for v in result.values()]
    assert max(loads) - min(loads) <= 1, f"unbalanced {loads}"


@given(_tps, st.integers(1, 12))
def test_fresh_assignment_invariants(parts: list[TopicPartition], tmax: int) -> None:
    result = assign(parts, tmax)
    _check_invariants(result, parts, tmax)
    assert assign(list(reversed(parts)), tmax) == result, "deterministic, order-independent"


@settings(max_examples=examples(300))
@given(_tps, _tps, st.integers(1, 12), st.integers(1, 12))
def test_sticky_reassignment_is_balanced_and_minimal(
    before: list[TopicPartition], after: list[TopicPartition], t1: int, t2: int
) -> None:
    previous = assign(before, t1)
    result = assign(after, t2, previous)
    _check_invariants(result, after, t2)

    # Independent lower bound on moves: with q = P // n and r = P % n, each surviving task keeps
    # at most q partitions, plus one more on at most r tasks.
    unique = set(after)
    if not unique:
        return
    n = min(t2, len(unique))
    q, r = divmod(len(unique), n)
    kept = [sum(1 for tp in previous.get(t, []) if tp in unique) for t in range(n)]
    over = [k for k in kept if k > q]
    lower_bound = sum(k - q for k in over) - min(r, len(over))
    # partitions whose previous task no longer exists must move too
    lower_bound += sum(1 for t, tps in previous.items() if t >= n for tp in tps if tp in unique)
    assert count_moves(previous, result) == lower_bound


@given(_tps, st.integers(1, 12))
def test_same_input_means_no_moves(parts: list[TopicPartition], tmax: int) -> None:
    first = assign(parts, tmax)
    assert assign(parts, tmax, first) == first


def test_new_partitions_go_to_least_loaded_tasks() -> None:
    prev = {0: [TopicPartition("a", 0), TopicPartition("a", 1)], 1: [TopicPartition("a", 2)]}
    parts = [TopicPartition("a", i) for i in range(4)]
    result = assign(parts, 2, prev)
    assert result == {
        0: [TopicPartition("a", 0), TopicPartition("a", 1)],
        1: [TopicPartition("a", 2), TopicPartition("a", 3)],
    }


def test_removed_partitions_dropped_and_rebalanced_minimally() -> None:
    tps = [TopicPartition("t", i) for i in range(6)]
    prev = {0: tps[0:2], 1: tps[2:4], 2: tps[4:6]}
    # drop both partitions of task 2: one partition must move there (3 tasks, 4 partitions)
    result = assign(tps[:4], 3, prev)
    assert count_moves(prev, result) == 1
    assert sorted(len(v) for v in result.values()) == [1, 1, 2]


def test_fewer_partitions_than_tasks_and_shrinking_tasks() -> None:
    tps = [TopicPartition("t", i) for i in range(3)]
    assert assign(tps, 10) == {0: [tps[0]], 1: [tps[1]], 2: [tps[2]]}
    prev = {0: [tps[0]], 1: [tps[1]], 2: [tps[2]]}
    result = assign(tps, 2, prev)  # task 2 disappears; its partition moves, others stay
    assert task_of(result)[tps[0]] == 0 and task_of(result)[tps[1]] == 1
    assert count_moves(prev, result) == 1  # only tps[2], whose task no longer exists


def test_duplicate_previous_placements_are_resolved() -> None:
    tp = TopicPartition("t", 0)
    result = assign([tp], 2, {0: [tp], 1: [tp]})
    assert result == {0: [tp]}


def test_empty_and_invalid() -> None:
    assert assign([], 3) == {}
    with pytest.raises(ValueError):
        assign([TopicPartition("t", 0)], 0)
