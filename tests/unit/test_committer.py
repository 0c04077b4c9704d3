"""mm2py.engine.committer: a periodic commit writes what moved since the one before, and what a
failed one held is written with the next (NOTHING_DROPPED)."""

from __future__ import annotations

from collections.abc import Mapping

from mm2py.engine.committer import Committer, MovedSince
from mm2py.engine.task_contract import TaskMetrics
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition
from tests.support.memory_task import MemoryProgress

A, B, C = (TopicPartition("t", p) for p in range(3))


def test_moved_since_names_every_partition_first_then_only_those_that_moved() -> None:
    moved = MovedSince()
    acked = {A: 1, B: 2, C: 3}
    ends: dict[TopicPartition, int | None] = {A: 10, B: None, C: 30}
    assert list(moved.take(acked, ends)) == [A, B, C]
    assert list(moved.take(acked, ends)) == []
    acked[B] = 5
    assert list(moved.take(acked, ends)) == [B]
    ends[C] = 31  # the target end moved alone (a reconciled tail, say)
    assert list(moved.take(acked, ends)) == [C]
    acked[A], ends[A] = 2, 11  # both moved: named once
    assert list(moved.take(acked, ends)) == [A]


def test_moved_since_names_every_partition_when_the_partitions_change() -> None:
    moved = MovedSince()
    moved.take({A: 1, B: 2}, {A: 1, B: 2})
    assert list(moved.take({A: 1, B: 2, C: 0}, {A: 1, B: 2, C: None})) == [A, B, C]
    assert list(moved.take({A: 1}, {A: 1})) == [A]


class FlakyProgress(MemoryProgress):
    """Refuses the writes it is told to, and keeps what each write held."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = 0
        self.writes: list[dict[TopicPartition, Position]] = []

    def commit(self, positions: Mapping[TopicPartition, Position]) -> None:
        self.writes.append(dict(positions))
        if self.refuse:
            self.refuse -= 1
            raise RuntimeError("the target is unreachable")
        super().commit(positions)


async def test_what_a_failed_periodic_commit_held_is_written_with_the_next() -> None:
    progress = FlakyProgress()
    now = [0.0]
    committer = Committer(progress, TaskMetrics(), 1.0, lambda: now[0], "t-0")

    acked: dict[TopicPartition, int] = {A: 0, B: 0, C: 0}
    ends: dict[TopicPartition, int | None] = {A: 0, B: 0, C: 0}

    async def periodic(**moves: int) -> None:
        for name, to in moves.items():
            tp = {"a": A, "b": B, "c": C}[name]
            acked[tp], ends[tp] = to, to * 10
        now[0] += 1.0
        await committer.maybe(acked, ends)
        await committer.settle()

    await periodic()  # the first names every partition
    assert progress.writes == [{A: Position(0, 0), B: Position(0, 0), C: Position(0, 0)}]
    progress.refuse = 1
    await periodic(a=5, b=7)
    assert committer.metrics.commit_failures == 1 and progress.writes[-1] == {A: Position(5, 50),
                                                                               B: Position(7, 70)}
    await periodic(b=9, c=1)  # B moved again: the newer one wins
    assert progress.writes[-1] == {A: Position(5, 50), B: Position(9, 90), C: Position(1, 10)}
    assert progress.stored == progress.writes[-1]
    await periodic(c=2)  # nothing left over once written
    assert progress.writes[-1] == {C: Position(2, 20)}
    await periodic()  # nothing moved: nothing written
    assert len(progress.writes) == 4 and committer.metrics.commits == 3


async def test_tasks_started_apart_commit_together_on_the_interval_grid() -> None:
    """ON_THE_GRID: two tasks of one process, started 0.3 s apart, fall due at the same moments (a
    shared progress producer then sends their records together)."""
    now = [10.3]
    first = Committer(MemoryProgress(), TaskMetrics(), 1.0, lambda: now[0], "t-0")
    now[0] = 10.6
    second = Committer(MemoryProgress(), TaskMetrics(), 1.0, lambda: now[0], "t-1")
    assert first.due_in() == second.due_in() == 11.0 - 10.6
    acked: dict[TopicPartition, int] = {A: 1}
    ends: dict[TopicPartition, int | None] = {A: 10}
    for at in (10.99, 11.0, 11.4, 12.05):
        now[0] = at
        for c in (first, second):
            await c.maybe(acked, ends)
            await c.settle()
            acked[A] += 1  # something to write each time
    # neither before 11.0; both at 11.0 and at 12.05, not at 11.4; then both due at 13.0
    assert first.metrics.commits == second.metrics.commits == 2
    assert first.due_in() == second.due_in() == 13.0 - 12.05
