"""Foreign writes into an idle remote partition (issue 46 item 4), in memory over real batch bytes:
the task asks the idle partitions' remote ends once per interval and names a foreign write there
without a batch of its own to acknowledge; a partition with a batch in flight is not asked. The
same on real brokers: tests/integration/test_target_refusals.py."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from mm2py.engine.idle_check import IdleCheck
from mm2py.engine.losses import Alarm, LossWatch, MirrorAlarmError, Policy
from mm2py.engine.task import TaskRunner
from mm2py.engine.task_contract import TaskMetrics, TaskSpec
from mm2py.engine.task_positions import TaskPositions
from mm2py.protocol.types import TopicPartition
from tests.support.memory_task import TP, Log, MemoryProgress, MemorySink, MemorySource, batch, values


class AskedSink(MemorySink):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[TopicPartition]] = []

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        self.asked.append(list(partitions))
        return await super().end_offsets(partitions)


@pytest.mark.parametrize("policy", ["skip", "fail"])
def test_a_foreign_write_into_an_idle_partition_is_named_within_one_interval(policy: str) -> None:
    log = Log([batch(0, 3)], end=3)
    now = [0.0]
    sink = AskedSink()
    runner = TaskRunner(TaskSpec(None, 0, (TP,)), MemorySource({TP: log}), sink, MemoryProgress(),
                        commit_interval=0, retry_backoff=0, clock=lambda: now[0], idle_check_interval=30.0,
                        alarms={Alarm.FOREIGN_RECORDS: Policy(policy)})

    async def mirror() -> None:
        stop = asyncio.Event()
        running = asyncio.create_task(runner.run(stop))

        async def until(done: object) -> None:
            while not done():  # type: ignore[operator]
                if running.done():
                    return
                await asyncio.sleep(0.001)

        await until(lambda: runner.positions().get(TP) == 3)
        asks = len(sink.asked)
        sink.target[TP].append(bytes(batch(0, 2)))  # another producer writes two records there
        now[0] = 29.9
        await asyncio.sleep(0.05)
        assert len(sink.asked) == asks and runner.metrics.audit_foreign_records == 0  # not yet due
        now[0] = 30.0
        await until(lambda: runner.metrics.audit_foreign_records == 1)
        if policy == "fail":
            with pytest.raises(MirrorAlarmError):
                await running
            return
        # skip: named once; the mirror's next batch lands after the foreign records, no second alarm
        log.batches.append(batch(3, 2))
        log.end = 5
        await until(lambda: runner.positions().get(TP) == 5)
        now[0] = 60.0
        await until(lambda: runner.idle_check.checks >= 2)
        stop.set()
        await running

    asyncio.run(asyncio.wait_for(mirror(), 30))
    assert runner.metrics.audit_foreign_records == 1
    [event] = runner.losses.recent
    assert "idle remote partition ends at 5" in event.describe() and "3..4 (2)" in event.describe()
    if policy == "skip":
        assert values(sink)[:3] == [b"v0", b"v1", b"v2"] and values(sink)[5:] == [b"v3", b"v4"]
        assert runner.state == "STOPPED"
    else:
        assert runner.state == "FAILED"


def test_a_partition_with_a_batch_in_flight_is_not_asked() -> None:
    other = TopicPartition("orders", 1)
    pos = TaskPositions()
    pos.start(TP, 10, 10, None)
    pos.start(other, 10, 10, None)
    pos.fetched(other, 15)  # handed to the sink, not acknowledged
    sink = AskedSink()
    now = [0.0]
    check = IdleCheck(1.0, clock=lambda: now[0])
    now[0] = 1.0
    losses = LossWatch("0", TaskMetrics())

    async def go() -> None:
        assert check.step(pos, sink, losses) is None
        await asyncio.sleep(0)

    asyncio.run(go())
    assert sink.asked == [[TP]]
