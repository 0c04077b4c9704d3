"""The Spark driver's side of one flow: controller, topic refresh, round planning, task state.

:class:`SparkFlowRunner` is to the Spark runtime what ``FlowRunner`` is to the in-process one: it
shares :class:`~mm2py.runtime.flows.FlowRunnerBase` with it (the flow's controller, start,
checkpoint connector and topic ACL sync on the driver, ``status()``), plans each round's work
from the source end offsets, and keeps per-task state and metrics (:class:`SparkTask`) from the
rounds' results.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mm2py.client.cluster import LATEST, ClusterClient
from mm2py.config.models import FlowConfig
from mm2py.engine.controller import Plan
from mm2py.engine.latency import PartitionTimes
from mm2py.engine.task_contract import HALTED_STATES, RUN_COUNTERS, TaskMetrics, TaskState
from mm2py.protocol.types import TopicPartition
from mm2py.retry import Backoff
from mm2py.runtime.active_topics import acknowledged_topics
from mm2py.runtime.flows import Claims, FlowRunnerBase
from mm2py.runtime.spark.driver.round_plan import plan_round
from mm2py.runtime.spark.executor.round import RoundResult, RoundWork

if TYPE_CHECKING:
    from mm2py.runtime.spark.executor.lease import LeaseResult

log = logging.getLogger(__name__)

#: a failed task runs again 0.5 s later, doubling with each failure in a row up to 30 s
#: (``delay`` only)
TASK_RESTART_BACKOFF = Backoff(0.5, 30.0)



@dataclass
class SparkTask:
    """The driver's view of one task (the attributes the in-process TaskRunner exposes)."""

    task_id: int
    partitions: tuple[TopicPartition, ...] = ()
    state: TaskState = TaskState.UNASSIGNED
    trace: str | None = None
    metrics: TaskMetrics = field(default_factory=TaskMetrics)
    rounds: int = 0
    failed_rounds: int = 0
    consecutive_failures: int = 0
    retry_at: float = 0.0
    last_round_seconds: float = 0.0
    #: as its running lease last reported them: partitions held at a record the target refuses
    #: even alone, and partitions the target refuses (each with its cause and what to change)
    held_partitions: list[str] = field(default_factory=list)
    refused_partitions: list[dict[str, Any]] = field(default_factory=list)
    waiting_for_target: list[dict[str, Any]] = field(default_factory=list)

    def absorb(self, result: RoundResult, now: float) -> None:
        """Fold one round's outcome in: counters add up, lag is the latest, errors are kept."""
        self.rounds += 1
        self.last_round_seconds = result.seconds
        for name in RUN_COUNTERS:
            setattr(self.metrics, name, getattr(self.metrics, name) + getattr(result.metrics, name))
        mine = set(self.partitions)
        self.metrics.lag.update({tp: lag for tp, lag in result.metrics.lag.items() if tp in mine})
        if result.error is None:
            self.state, self.trace, self.consecutive_failures = TaskState.RUNNING, None, 0
            return
        self.fail(result.error, now)

    def fail(self, error: str, now: float, halted: bool = False) -> None:
        """FAILED; run again from its committed progress after the back-off, unless ``halted`` (an
        alarm under ``fail``: not until the flow is restarted)."""
        self.state, self.trace = TaskState.FAILED, error
        self.failed_rounds += 1
        self.consecutive_failures += 1
        if halted:
            self.retry_at = math.inf
            return
        self.metrics.restarts += 1
        self.retry_at = now + TASK_RESTART_BACKOFF.delay(self.consecutive_failures - 1)


class SparkFlowRunner(FlowRunnerBase[SparkTask]):
    """One ``source->target`` flow run by the Spark driver (controller here, tasks on executors)."""

    def __init__(
        self, flow: FlowConfig, *, round_seconds: float = 10.0, commit_interval: float = 1.0,
        claims: Claims | None = None,
    ) -> None:
        self.settings = self._init_flow(flow, claims)
        self.round_seconds = round_seconds
        self.commit_interval = commit_interval
        self.positions: dict[TopicPartition, int] = {}  # committed, as the last rounds reported
        self._source: ClusterClient | None = None

    async def _connect(self) -> None:
        source = self.flow.source_cluster.bootstrap_servers
        self._source = ClusterClient(source, self.settings.source_client)
        await self._source.start()

    async def refresh(self) -> Plan:
        """Discover topics now; the next round runs the new assignment."""
        async with self._refresh_lock:
            plan = await self._plan()
            with self._lock:
                self.last_plan = plan
                for task_id, parts in plan.assignment.items():
                    task = self.tasks.setdefault(task_id, SparkTask(task_id))
                    task.partitions = tuple(sorted(parts))
                    task.metrics.lag = {tp: v for tp, v in task.metrics.lag.items() if tp in parts}
                for task_id, task in self.tasks.items():
                    if task_id not in plan.assignment:
                        task.partitions, task.state, task.metrics.lag = (), TaskState.UNASSIGNED, {}
                wanted = set(plan.partitions)
                self.positions = {tp: o for tp, o in self.positions.items() if tp in wanted}
            return plan

    async def plan(self, now: float) -> list[RoundWork]:
        """This round's work for this flow (reads the source end offsets)."""
        if self.last_plan is None or self._source is None or not self.last_plan.partitions:
            return []
        ends = await self._source.list_offsets(
            self.last_plan.partitions, LATEST, isolation_level=self.settings.fetcher.isolation_level
        )
        with self._lock:
            for task in self.tasks.values():
                for tp in task.partitions:
                    if tp in self.positions and tp in ends:
                        task.metrics.lag[tp] = max(0, ends[tp] - self.positions[tp])
            hold = {t.task_id for t in self.tasks.values() if t.retry_at > now}
            assignment = {t.task_id: t.partitions for t in self.tasks.values()}
            return plan_round(self.flow, assignment, ends, self.positions, budget=self.round_seconds,
                              commit_interval=self.commit_interval, hold=hold)

    def partition_count(self) -> int:
        """The partitions the flow's tasks mirror now (its leases pace as one process of them)."""
        return sum(len(task.partitions) for task in self.tasks.values())

    def absorb(self, result: RoundResult, now: float) -> None:
        with self._lock:
            task = self.tasks.setdefault(result.task_id, SparkTask(result.task_id))
            task.absorb(result, now)
            if result.error is None:
                self.positions.update(result.positions)
            else:
                for tp in result.partitions:  # unknown until a round commits again
                    self.positions.pop(tp, None)
        self.acknowledged(acknowledged_topics(result.metrics.times))
        for warning in result.warnings:
            log.warning("%s task %d (%s): %s", self.name, result.task_id, result.executor, warning)
        if result.error is not None:
            log.error("%s task %d: round failed on %s: %s; retrying from the committed progress",
                      self.name, result.task_id, result.executor, result.error)

    # -- leases (see spark_leases) ----------------------------------------------------------------
    def report_lease(self, task_id: int, lag: Mapping[TopicPartition, int],
                     fold: Callable[[SparkTask], None],
                     times: Mapping[TopicPartition, PartitionTimes] | None = None,
                     standing: tuple[Sequence[str], Sequence[Mapping[str, Any]],
                                     Sequence[Mapping[str, Any]]] = ((), (), ())) -> None:
        """A running lease reported: its task runs; its counters and lag are the latest. A
        report of a lease still winding down after the flow was paused or stopped (its last,
        while it commits) leaves the task STOPPED: resuming makes a new runner."""
        with self._lock:
            task = self.tasks.get(task_id)
            if task is None:
                return
            fold(task)
            task.held_partitions, task.refused_partitions = list(standing[0]), [dict(r) for r in standing[1]]
            task.waiting_for_target = [dict(w) for w in standing[2]]
            mine = set(task.partitions)  # a tuple of thousands: ``in`` on it would scan it each time
            task.metrics.lag.update({tp: v for tp, v in lag.items() if tp in mine})
            if task.partitions and self.state not in HALTED_STATES:
                task.state, task.trace = TaskState.RUNNING, None
        # the topics acknowledged: among the partitions the report changed (``times``), if given
        self.acknowledged(acknowledged_topics(task.metrics.times if times is None else times))

    def absorb_lease(self, result: LeaseResult, now: float) -> None:
        """A lease's Spark job returned (its counters were folded in by the scheduler)."""
        with self._lock:
            task = self.tasks.get(result.task_id)
            if task is not None:
                task.rounds += 1
                task.last_round_seconds = result.seconds
                if result.error is not None:
                    task.fail(result.error, now, result.halted)
                elif result.granted:
                    task.consecutive_failures = 0
            if result.error is None:
                self.positions.update(result.positions)
        self.acknowledged(acknowledged_topics(result.metrics.times))
        for warning in result.warnings:
            log.warning("%s task %d (%s): %s", self.name, result.task_id, result.executor, warning)
        if result.error is not None:
            log.error("%s task %d: lease failed on %s: %s; retrying from the committed progress",
                      self.name, result.task_id, result.executor, result.error)

    def fail_task(self, task_id: int, error: str, now: float) -> None:
        """The task's Spark job failed before it reported (executor lost, worker crash)."""
        with self._lock:
            self.tasks.setdefault(task_id, SparkTask(task_id)).fail(error, now)

    def fail_round(self, work: RoundWork, error: str, now: float) -> None:
        """The round's Spark job failed before this task reported (executor lost, worker crash)."""
        with self._lock:
            self.tasks.setdefault(work.spec.task_id, SparkTask(work.spec.task_id)).fail(error, now)
            for tp in work.spec.partitions:
                self.positions.pop(tp, None)

    async def stop(self) -> None:
        await self._stop_jobs()
        if self._source is not None:
            with contextlib.suppress(Exception):
                await self._source.close()
            self._source = None
        with self._lock:
            self.state = TaskState.STOPPED
            for task in self.tasks.values():
                if task.state == TaskState.RUNNING:
                    task.state = TaskState.STOPPED
