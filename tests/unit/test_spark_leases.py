"""The Spark driver's lease decisions and figures, with Spark replaced by a blocking function
(the executor side is covered by the integration tests on real brokers and Spark)."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from mm2py.engine.task_contract import TaskMetrics, TaskSpec
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.spark.driver.flow_runner import SparkTask
from mm2py.runtime.spark.driver.lease_book import LeaseBook
from mm2py.runtime.spark.driver.lease_scheduler import LeaseScheduler, LeaseSettings
from mm2py.runtime.spark.driver.lease_table import LeaseState
from mm2py.runtime.spark.executor.lease import LeaseResult, LeaseWork
from mm2py.runtime.spark.lease_messages import Report

A, B, C = (TopicPartition("orders", p) for p in range(3))


def test_a_tasks_figures_are_its_ended_leases_plus_the_running_ones_latest_reports() -> None:
    task = SparkTask(0, (A,))
    book = LeaseBook()
    book.report(Report("l1", "t", {"records": 10, "bytes": 100}, {}, (1, 0)))
    book.fold(task)
    assert (task.metrics.records, task.metrics.bytes) == (10, 100)
    book.report(Report("l1", "t", {"records": 25, "bytes": 250}, {}, (2, 0)))  # cumulative
    book.report(Report("l2", "t", {"records": 1, "bytes": 10}, {}, (0, 1)))  # its successor
    book.fold(task)
    assert task.metrics.records == 26 and book.codec() == (2, 1)
    final = LeaseResult("f", 0, "l1", (A,), granted=True, metrics=TaskMetrics(records=30, bytes=300),
                        codec=(3, 0))
    book.end("l1", final)  # the executor's final figures replace its last report
    book.end("l2", None)  # a failed job: its last report is all there is
    book.fold(task)
    assert (task.metrics.records, task.metrics.bytes) == (31, 310)
    assert book.codec() == (3, 1)


def test_a_lost_lease_whose_refused_rerun_ends_its_job_keeps_its_counts() -> None:
    """Spark re-runs the task of a killed executor; the driver refuses that attempt, whose result
    (never granted, nothing counted) ends the job: the lost lease's last report stands."""
    task = SparkTask(0, (A,))
    book = LeaseBook()
    book.report(Report("l1", "t", {"records": 24_466, "bytes": 9}, {}, (4, 0)))
    book.fold(task)
    seen = task.metrics.records
    book.end("l1", LeaseResult("f", 0, "l1", (A,), granted=False))
    book.fold(task)
    assert task.metrics.records == seen == 24_466 and book.codec() == (4, 0)


def test_a_report_carries_the_partitions_whose_times_changed_and_the_book_keeps_the_rest() -> None:
    """A lease of thousands of partitions reports only the times that moved; the driver keeps
    every partition's latest, so the task's figures still cover all of them."""
    from mm2py.engine.latency import PartitionTimes

    def times(n: int, lag: float) -> PartitionTimes:
        t = PartitionTimes(lag_seconds=lag)
        for _ in range(n):
            t.replication.observe(0.01)
        return t

    task = SparkTask(0, (A, B))
    book = LeaseBook()
    book.report(Report("l1", "t", {"records": 3}, {}, (0, 0), {A: times(2, 1.0), B: times(1, 0.0)}))
    book.report(Report("l1", "t", {"records": 4}, {}, (0, 0), {A: times(3, 0.0)}))  # B unchanged
    book.fold(task)
    assert sum(task.metrics.times[A].replication.counts) == 3  # the latest, not both added
    assert sum(task.metrics.times[B].replication.counts) == 1  # kept from the first report
    book.end("l1", None)  # its job failed: what it reported stands, every partition of it
    book.fold(task)
    assert set(task.metrics.times) == {A, B} and sum(task.metrics.times[A].replication.counts) == 3


class FakeFlow:
    """The parts of a SparkFlowRunner the scheduler uses."""

    def __init__(self, tasks: dict[int, tuple[TopicPartition, ...]]) -> None:
        self.name = "f"
        self.flow: Any = type("Flow", (), {"name": "f"})()
        self.state = "RUNNING"
        self.tasks = {i: SparkTask(i, parts) for i, parts in tasks.items()}
        self.absorbed: list[LeaseResult] = []

    def absorb_lease(self, result: LeaseResult, now: float) -> None:
        self.absorbed.append(result)

    def fail_task(self, task_id: int, error: str, now: float) -> None:
        self.tasks[task_id].fail(error, now)

    def report_lease(self, task_id: int, lag: Any, fold: Any, times: Any = None) -> None:
        fold(self.tasks[task_id])


def test_leases_cover_every_task_get_successors_and_follow_reassignment() -> None:
    release = threading.Event()
    works: list[LeaseWork] = []

    def collect(work: LeaseWork) -> LeaseResult:  # a Spark job that lasts until released
        works.append(work)
        release.wait(10)
        return LeaseResult("f", work.spec.task_id, work.lease_id, work.spec.partitions)

    async def go() -> None:
        flow = FakeFlow({0: (A, B), 1: (C,)})
        sched = LeaseScheduler({"f": flow}, collect, LeaseSettings(lease_seconds=0.3))  # type: ignore[dict-item]
        await sched.start()
        try:
            await sched.step()
            assert sched.started == 2  # one lease per task
            await sched.step()
            assert sched.started == 2  # not granted yet: no successor
            table = sched.table
            for lease in list(table.leases.values()):  # both connect and are granted
                table.ready(lease.lease_id, time.monotonic())
            await asyncio.sleep(0.35)
            await sched.step()
            assert sched.started == 4  # both ran a lease length: successors started
            flow.tasks[0].partitions = (A,)  # B went away
            flow.tasks[1].partitions = (B, C)  # and moved to task 1
            await sched.step()
            current = {t: table.current("f", t)[-1] for t in (0, 1)}
            assert current[0].partitions == {A} and current[1].partitions == {B, C}
            # the not-yet-granted successors of the old assignment were cancelled
            assert sum(x.cancelled for x in table.leases.values()) == 2
            flow.tasks[0].partitions = ()  # a task that goes away stops its leases
            await sched.step()
            assert all(x.state in (LeaseState.STOPPING, LeaseState.RELEASED) or x.cancelled
                       for x in table.current("f", 0))
        finally:
            release.set()
            await sched.stop(timeout=5)
        assert {w.spec.partitions for w in works} >= {(A, B), (C,), (A,), (B, C)}

    asyncio.run(go())


def test_a_halted_flow_gets_its_leases_stopped_none_started_and_the_halt_waits_for_the_release() -> None:
    release = threading.Event()

    def collect(work: LeaseWork) -> LeaseResult:
        release.wait(10)
        return LeaseResult("f", work.spec.task_id, work.lease_id, work.spec.partitions)

    async def go() -> None:
        flow = FakeFlow({0: (A, B)})
        halted: dict[str, str] = {}
        sched = LeaseScheduler({"f": flow}, collect, LeaseSettings(), halted=halted)  # type: ignore[dict-item]
        await sched.start()
        try:
            await sched.step()
            table = sched.table
            (lease,) = table.leases.values()
            table.ready(lease.lease_id, time.monotonic())
            assert sched.writing("f")
            halted["f"] = "PAUSED"  # as the worker records it
            await sched.step()  # the step fences the flow and stops its lease
            assert lease.state is LeaseState.STOPPING and "f" in table.halted
            assert not await sched.released("f", timeout=0.1)  # not released yet
            await sched.step()
            assert sched.started == 1  # none started while halted
            table.released(lease.lease_id, {A: None, B: None}, time.monotonic())
            assert await sched.released("f", timeout=1)
            del halted["f"]  # resumed
            await sched.step()
            assert "f" not in table.halted and sched.started == 2
        finally:
            release.set()
            await sched.stop(timeout=5)

    asyncio.run(go())



def test_a_lease_stopped_by_an_alarm_under_fail_leaves_its_task_failed_and_not_started_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from mm2py.engine.losses import Alarm, AlarmEvent, MirrorAlarmError
    from mm2py.runtime.spark.executor import lease as lease_module

    task = SparkTask(0, (A,))
    task.fail("SinkError: broker went away", now=10.0)
    assert task.retry_at == 10.5 and task.metrics.restarts == 1  # an ordinary failure: retried
    task.fail("MirrorAlarmError: target.truncated (policy fail): ...", now=20.0, halted=True)
    assert task.state == "FAILED" and task.retry_at == float("inf") and task.metrics.restarts == 1

    async def alarmed(work: LeaseWork, result: LeaseResult) -> None:
        raise MirrorAlarmError(AlarmEvent(Alarm.TARGET_TRUNCATED, A, 6, 0, 0.0))

    monkeypatch.setattr(lease_module, "_lease", alarmed)
    work = SimpleNamespace(flow="f", lease_id="l9", spec=TaskSpec(None, 0, (A,)))
    result = lease_module.run_lease(work)  # type: ignore[arg-type]
    assert result.halted and (result.error or "").startswith("MirrorAlarmError: target.truncated")


async def test_a_report_after_the_flow_was_halted_leaves_its_task_stopped() -> None:
    """A lease winding down after a pause or stop (its last report, while it commits) does not
    mark its task RUNNING again: the halted flow's status shows no running task (a resume makes a
    new runner)."""
    from mm2py.engine.task_contract import TaskState
    from mm2py.runtime.spark.driver.flow_runner import SparkFlowRunner
    from tests.support.brokers import mirror_config

    config: Any = mirror_config({"east": "127.0.0.1:9", "west": "127.0.0.1:9"},
                                {"east->west": {"topics": "orders"}})
    runner = SparkFlowRunner(config.enabled_flows()[0])
    runner.tasks[0] = SparkTask(0, (A,))
    runner.report_lease(0, {A: 3}, lambda task: None)
    assert runner.tasks[0].state is TaskState.RUNNING
    await runner.stop()
    assert runner.tasks[0].state is TaskState.STOPPED
    runner.report_lease(0, {A: 0}, lambda task: None)
    assert runner.tasks[0].state is TaskState.STOPPED and runner.tasks[0].metrics.lag == {A: 0}
    runner.state = TaskState.PAUSED  # as the worker marks a paused flow
    runner.report_lease(0, {A: 0}, lambda task: None)
    assert runner.tasks[0].state is TaskState.STOPPED


def test_a_leases_report_names_only_the_partitions_whose_times_or_lag_moved() -> None:
    from mm2py.engine.latency import PartitionTimes
    from mm2py.runtime.spark.executor.lease import _report

    metrics = TaskMetrics()
    metrics.times = {A: PartitionTimes(), B: PartitionTimes()}
    metrics.lag = {A: 5, B: 0}
    runner = SimpleNamespace(metrics=metrics, held_partitions=[], refused_partitions=[],
                             waiting_for_target=[])
    work = SimpleNamespace(lease_id="l1", token="t")
    sent: dict[Any, Any] = {}
    lag_sent: dict[Any, int] = {}
    driver_lag: dict[Any, int] = {}  # the driver's view: updated by each report (report_lease)

    def report() -> Any:
        r = _report(work, runner, (0, 0), sent, lag_sent)  # type: ignore[arg-type]
        driver_lag.update(r.lag)
        return r

    first = report()
    assert set(first.times) == {A, B} and first.lag == {A: 5, B: 0}
    assert report().times == {} and report().lag == {}
    metrics.times[B].replication.observe(0.02)
    metrics.lag[A] = 2
    second = report()
    assert set(second.times) == {B} and second.lag == {A: 2}
    metrics.times[A].lag_seconds = 3.0
    assert set(report().times) == {A}
    assert driver_lag == metrics.lag  # the deltas add up to the lease's lag


def test_folding_a_reports_changed_partitions_gives_what_a_full_fold_gives() -> None:
    """The driver refolds only the partitions a report changed; the result must be the full
    fold's, ended leases' figures and each running lease's included."""
    import random

    from mm2py.engine.latency import PartitionTimes

    rng = random.Random(7)
    parts = [TopicPartition("orders", p) for p in range(40)]

    def times(tps: list[TopicPartition]) -> dict[TopicPartition, PartitionTimes]:
        out = {}
        for tp in tps:
            t = PartitionTimes(lag_seconds=rng.random())
            for _ in range(rng.randrange(4)):
                t.replication.observe(rng.random())
                t.age.observe(rng.random())
            out[tp] = t
        return out

    task, book = SparkTask(0, tuple(parts)), LeaseBook()
    book.report(Report("l1", "t", {}, {}, (0, 0), times(parts)))
    book.fold(task)
    book.end("l1", LeaseResult("f", 0, "l1", tuple(parts), granted=True,
                               metrics=TaskMetrics(times=times(parts[:20]))))
    book.fold(task)
    for lease in ("l2", "l3"):
        for _ in range(5):
            changed = times(rng.sample(parts, 7))
            book.report(Report(lease, "t", {}, {}, (0, 0), changed))
            book.fold(task, changed.keys())
    incremental = {tp: (t.replication.counts, t.replication.total, t.age.counts, t.lag_seconds)
                   for tp, t in task.metrics.times.items()}
    book.fold(task)  # a full fold
    full = {tp: (t.replication.counts, t.replication.total, t.age.counts, t.lag_seconds)
            for tp, t in task.metrics.times.items()}
    assert incremental == full
