"""mm2py.engine.task_assignment: a task's :class:`Reassignment` (on a TaskRunner over the in-memory
source, sink and progress of tests/support/memory_task.py): the assignment waiting, its taking
between rounds (partitions given up committed first, new ones started from the stored progress or a
seed), a failed taking kept for the next round, and deferred starts asked for again only when due."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from mm2py.engine.task import TaskRunner
from mm2py.engine.task_contract import TaskSpec
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition
from tests.support.memory_task import TP, Log, MemoryProgress, MemorySink, MemorySource, batch

pytestmark = pytest.mark.native_path

OTHER = TopicPartition("orders", 1)
LOGS = {TP: Log([batch(0, 4), batch(4, 4)], end=8), OTHER: Log([batch(0, 6)], end=6)}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _runner(partitions: Sequence[TopicPartition], progress: MemoryProgress, sink: MemorySink | None = None,
            source: MemorySource | None = None, clock: Clock | None = None) -> TaskRunner:
    return TaskRunner(TaskSpec(None, 0, tuple(partitions)), source or MemorySource(LOGS),
                      sink or MemorySink(), progress, commit_interval=3600, retry_backoff=0,
                      clock=clock or Clock())


async def test_the_first_assignment_waits_until_taken_then_the_current_one_stands() -> None:
    runner = _runner([TP], MemoryProgress({TP: Position(4, 0)}))
    re = runner.reassignment
    assert re.pending == (TP,) and re.assignment(()) == (TP,) and re.due()
    assert await re.wait_applied(0.01) is False
    await re.apply(runner.source, runner.sink, verify=True)
    assert re.pending is None and re.applied.is_set() and await re.wait_applied(0.01)
    assert runner.positions() == {TP: 4}, "not started at the stored position"
    assert re.assignment((TP, OTHER)) == (TP, OTHER) and not re.due()
    await re.apply(runner.source, runner.sink, verify=True)  # nothing waits: nothing changes
    assert runner.positions() == {TP: 4}


class Commits(MemoryProgress):
    """Each commit's positions, in order."""

    def __init__(self, stored: dict[TopicPartition, Position]) -> None:
        super().__init__(stored)
        self.each: list[dict[TopicPartition, Position]] = []

    def commit(self, positions: Mapping[TopicPartition, Position]) -> None:
        self.each.append(dict(positions))
        super().commit(positions)


async def test_a_partition_given_up_is_committed_first_and_a_kept_one_keeps_its_position() -> None:
    progress = Commits({TP: Position(4, 0)})
    runner = _runner([TP], progress)
    re = runner.reassignment
    await re.apply(runner.source, runner.sink, verify=True)
    re.assign([TP, OTHER])
    assert re.pending == (TP, OTHER) and not re.applied.is_set() and re.due()
    await re.apply(runner.source, runner.sink, verify=True)
    assert runner.positions() == {TP: 4, OTHER: 0}, "the kept partition was restarted"
    assert all(TP not in c for c in progress.each), "the kept partition was committed"
    assert await runner.run_until({TP: 8, OTHER: 6}, timeout=10) == {TP: 8, OTHER: 6}
    before = len(progress.each)
    re.assign([OTHER])
    await re.apply(runner.source, runner.sink, verify=True)
    assert runner.partitions == (OTHER,)
    assert progress.each[before:] == [{TP: Position(8, 4)}], "not committed for the next owner"


async def test_a_seed_starts_its_partition_once_without_the_stored_progress() -> None:
    progress = MemoryProgress({TP: Position(0, 0), OTHER: Position(2, 0)})
    runner = _runner([TP, OTHER], progress)
    re = runner.reassignment
    re.seed({TP: Position(6, 3), TopicPartition("elsewhere", 0): Position(1, 1)})
    await re.apply(runner.source, runner.sink, verify=True)
    assert runner.positions() == {TP: 6, OTHER: 2}
    assert set(re.seeds) == {TopicPartition("elsewhere", 0)}, "a used seed was kept"


class FailingOnce(MemorySource):
    def __init__(self) -> None:
        super().__init__(LOGS)
        self.failed = False

    def expect_topic_ids(self, topic_ids: object) -> None:
        if not self.failed:
            self.failed = True
            raise ConnectionError("the source went away while the assignment was taken")


async def test_an_assignment_whose_taking_failed_is_taken_again_on_the_next_round() -> None:
    source = FailingOnce()
    runner = _runner([TP], MemoryProgress(), source=source)
    re = runner.reassignment
    with pytest.raises(ConnectionError):
        await re.apply(source, runner.sink, verify=True)
    assert re.pending == (TP,) and not re.applied.is_set()
    await re.apply(source, runner.sink, verify=True)
    assert re.pending is None and re.applied.is_set() and runner.positions() == {TP: 0}


class LateTarget(MemorySink):
    """``slow``'s target partition has no leader yet: its end is left out of the answer."""

    def __init__(self, slow: TopicPartition) -> None:
        super().__init__()
        self.slow: TopicPartition | None = slow

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        ends = await super().end_offsets(partitions)
        if self.slow is not None:
            ends.pop(self.slow, None)
        return ends


async def test_a_deferred_start_is_asked_for_again_only_when_due_and_a_new_assignment_at_once() -> None:
    clock, sink = Clock(), LateTarget(OTHER)
    runner = _runner([TP, OTHER], MemoryProgress(), sink=sink, clock=clock)
    re = runner.reassignment
    await re.apply(runner.source, sink, verify=True)
    assert runner.positions() == {TP: 0}, "the ready partition did not start"
    assert re.pending == (TP, OTHER) and not re.applied.is_set() and not re.due()
    clock.now += 0.1
    assert not re.due(), "asked again before the first back-off (0.2 s) ended"
    clock.now += 0.15
    assert re.due()
    await re.apply(runner.source, sink, verify=True)  # still no leader: deferred again, for longer
    clock.now += 0.3
    assert not re.due()
    re.assign([TP, OTHER])
    assert re.due(), "a new assignment waited for the deferred starts' back-off"
    sink.slow = None
    await re.apply(runner.source, sink, verify=True)
    assert runner.positions() == {TP: 0, OTHER: 0} and re.pending is None and re.applied.is_set()
