"""Balanced, sticky assignment of source partitions to tasks.

Like MM2's ``MirrorSourceConnector.taskConfigs`` the number of tasks is
``min(tasks_max, number of partitions)`` and loads differ by at most one. Unlike MM2 (plain round
robin, which reshuffles everything when a partition appears) a previous assignment is respected:
a partition stays on its task unless it must move to restore balance, and the number of moves is
the minimum possible. Results are deterministic for the same inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from mm2py.protocol.types import TopicPartition

__all__ = ["assign", "count_moves", "task_of"]

TaskAssignment = dict[int, list[TopicPartition]]


def assign(
    partitions: Iterable[TopicPartition],
    tasks_max: int,
    previous: Mapping[int, Sequence[TopicPartition]] | None = None,
) -> TaskAssignment:
    """Spread ``partitions`` over tasks ``0..n-1`` (``n = min(tasks_max, len(partitions))``).

    Every partition is assigned exactly once (duplicates in the input are ignored); each task list
    is sorted. With ``previous``, partitions that vanished are dropped, partitions of tasks that no
    longer exist are reassigned, and surviving placements are kept except where balance requires
    a move. New and displaced partitions go to the tasks with spare capacity, round robin in
    partition order (so one topic's partitions spread across tasks).
    """
    if tasks_max < 1:
        raise ValueError(f"tasks_max must be >= 1, got {tasks_max}")
    current = sorted({TopicPartition(*tp) for tp in partitions})
    if not current:
        return {}
    n = min(tasks_max, len(current))
    base, extra = divmod(len(current), n)

    # 1. Keep previous placements of partitions that still exist, on tasks that still exist.
    wanted = set(current)
    kept: dict[int, list[TopicPartition]] = {task: [] for task in range(n)}
    placed: set[TopicPartition] = set()
    prev: Mapping[int, Sequence[TopicPartition]] = previous or {}
    for task in sorted(prev):
        if not 0 <= task < n:
            continue
        for tp in sorted({TopicPartition(*p) for p in prev[task]}):
            if tp in wanted and tp not in placed:
                kept[task].append(tp)
                placed.add(tp)

    # 2. The ``extra`` tasks allowed base+1 partitions are those that already hold the most: this
    #    maximises what stays in place, hence minimises moves.
    by_load = sorted(range(n), key=lambda t: (-len(kept[t]), t))
    capacity = {task: base + (1 if rank < extra else 0) for rank, task in enumerate(by_load)}

    # 3. Trim overloaded tasks; everything unplaced goes to the pool.
    result: TaskAssignment = {}
    pool = [tp for tp in current if tp not in placed]
    for task in range(n):
        keep = kept[task][: capacity[task]]
        pool.extend(kept[task][capacity[task] :])
        result[task] = keep
    pool.sort()

    # 4. Fill spare capacity round robin over tasks in id order.
    needy = [task for task in range(n) if len(result[task]) < capacity[task]]
    i = 0
    for tp in pool:
        while len(result[needy[i % len(needy)]]) >= capacity[needy[i % len(needy)]]:
            i += 1
        result[needy[i % len(needy)]].append(tp)
        i += 1

    for task in result:
        result[task].sort()
    return result


def task_of(assignment: Mapping[int, Sequence[TopicPartition]]) -> dict[TopicPartition, int]:
    """Invert an assignment: partition -> task id."""
    return {TopicPartition(*tp): task for task, tps in assignment.items() for tp in tps}


def count_moves(
    previous: Mapping[int, Sequence[TopicPartition]],
    current: Mapping[int, Sequence[TopicPartition]],
) -> int:
    """Partitions present in both assignments whose task changed."""
    before = task_of(previous)
    return sum(1 for tp, task in task_of(current).items() if tp in before and before[tp] != task)
