"""The Spark runtime: the driver is every flow's controller, executors run the tasks in rounds.

The driver does what the in-process runtime's controller does — the same
:func:`~mm2py.runtime.inprocess.controller_for` and
:func:`~mm2py.runtime.inprocess.ensure_internal_topics`, a topic refresh every
``refresh.topics.interval.seconds``, heartbeats — and then runs micro-rounds: it reads the source
end offsets of every assigned partition, plans one :class:`~mm2py.runtime.spark_round.RoundWork`
per task with something to mirror (:func:`~mm2py.runtime.spark_round.plan_round`), runs them as
one Spark job (one Spark task per mirror task) and folds the results into per-task state and
metrics. A task's round starts from its committed progress, so a round that failed (reported
back, never swallowed) is simply run again next round, after a short back-off.

Rounds are sequential and a partition belongs to one task per round, so one writer per target
partition holds without hand-over: a partition that moves simply goes with the next round's task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mm2py.client.cluster import LATEST, ClusterClient
from mm2py.engine.config import FlowConfig, MirrorMakerConfig
from mm2py.engine.controller import Plan
from mm2py.engine.filters import TopicFilter
from mm2py.engine.task_api import TaskMetrics
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.inprocess import controller_for, ensure_internal_topics
from mm2py.runtime.spark_round import RoundResult, RoundWork, plan_round, run_round
from mm2py.runtime.spark_session import default_master, spark_session

log = logging.getLogger(__name__)

_COUNTERS = ("batches", "records", "bytes", "rebuilt_batches", "sink_failures", "offsets_lost_to_retention",
             "syncs", "commits", "commit_failures", "skipped_on_resume")


@dataclass
class SparkTask:
    """The driver's view of one task (the attributes the in-process TaskRunner exposes)."""

    task_id: int
    partitions: tuple[TopicPartition, ...] = ()
    state: str = "UNASSIGNED"
    trace: str | None = None
    metrics: TaskMetrics = field(default_factory=TaskMetrics)
    rounds: int = 0
    failed_rounds: int = 0
    consecutive_failures: int = 0
    retry_at: float = 0.0
    last_round_seconds: float = 0.0

    def absorb(self, result: RoundResult, now: float) -> None:
        """Fold one round's outcome in: counters add up, lag is the latest, errors are kept."""
        self.rounds += 1
        self.last_round_seconds = result.seconds
        for name in _COUNTERS:
            setattr(self.metrics, name, getattr(self.metrics, name) + getattr(result.metrics, name))
        self.metrics.lag.update({tp: lag for tp, lag in result.metrics.lag.items() if tp in self.partitions})
        if result.error is None:
            self.state, self.trace, self.consecutive_failures = "RUNNING", None, 0
            return
        self.fail(result.error, now)

    def fail(self, error: str, now: float) -> None:
        self.state, self.trace = "FAILED", error
        self.failed_rounds += 1
        self.consecutive_failures += 1
        self.retry_at = now + min(30.0, 0.5 * 2 ** (self.consecutive_failures - 1))


class SparkFlowRunner:
    """One ``source->target`` flow run by the Spark driver (controller here, tasks on executors)."""

    def __init__(
        self, flow: FlowConfig, *, round_seconds: float = 10.0, commit_interval: float = 1.0
    ) -> None:
        from connectors.client_settings import raw_client_settings

        # a bad client override is a configuration error now, not a failed round later
        self.settings = raw_client_settings(flow, fetch_max_bytes=flow.fetch_max_bytes)
        self.flow = flow
        self.round_seconds = round_seconds
        self.commit_interval = commit_interval
        self.controller = controller_for(flow)
        self.tasks: dict[int, SparkTask] = {}
        self.last_plan: Plan | None = None
        self.state = "UNASSIGNED"
        self.trace: str | None = None
        self.positions: dict[TopicPartition, int] = {}  # committed, as the last rounds reported
        self._source: ClusterClient | None = None
        self._next_refresh = 0.0
        self._refresh_lock = asyncio.Lock()
        self._lock = threading.Lock()  # status() may be read from other threads

    @property
    def name(self) -> str:
        return self.flow.name

    async def start(self) -> None:
        try:
            await asyncio.to_thread(ensure_internal_topics, self.flow, self.controller)
            await self.refresh()
            source = self.flow.source_cluster.bootstrap_servers
            self._source = ClusterClient(source, self.settings.source_client)
            await self._source.start()
        except Exception as exc:
            self.state, self.trace = "FAILED", f"{type(exc).__name__}: {exc}"
            raise
        self.state = "RUNNING"

    def refresh_due(self, now: float) -> bool:
        interval = self.flow.refresh_topics_interval_seconds
        if interval < 0 or not self.flow.refresh_topics_enabled:
            return False  # MM2: a negative interval (or refresh.topics.enabled=false) disables it
        return now >= self._next_refresh

    async def refresh(self) -> Plan:
        """Discover topics now; the next round runs the new assignment."""
        async with self._refresh_lock:
            plan = await asyncio.to_thread(self.controller.refresh)
            self._next_refresh = time.monotonic() + max(1, self.flow.refresh_topics_interval_seconds)
            with self._lock:
                self.last_plan = plan
                for task_id, parts in plan.assignment.items():
                    task = self.tasks.setdefault(task_id, SparkTask(task_id))
                    task.partitions = tuple(sorted(parts))
                    task.metrics.lag = {tp: v for tp, v in task.metrics.lag.items() if tp in parts}
                for task_id, task in self.tasks.items():
                    if task_id not in plan.assignment:
                        task.partitions, task.state, task.metrics.lag = (), "UNASSIGNED", {}
                wanted = set(plan.partitions)
                self.positions = {tp: o for tp, o in self.positions.items() if tp in wanted}
            return plan

    def set_topic_filter(self, topic_filter: TopicFilter) -> None:
        self.controller.set_topic_filter(topic_filter)

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

    def absorb(self, result: RoundResult, now: float) -> None:
        with self._lock:
            task = self.tasks.setdefault(result.task_id, SparkTask(result.task_id))
            task.absorb(result, now)
            if result.error is None:
                self.positions.update(result.positions)
            else:
                for tp in result.partitions:  # unknown until a round commits again
                    self.positions.pop(tp, None)
        for warning in result.warnings:
            log.warning("%s task %d (%s): %s", self.name, result.task_id, result.executor, warning)
        if result.error is not None:
            log.error("%s task %d: round failed on %s: %s; retrying from the committed progress",
                      self.name, result.task_id, result.executor, result.error)

    def fail_round(self, work: RoundWork, error: str, now: float) -> None:
        """The round's Spark job failed before this task reported (executor lost, worker crash)."""
        with self._lock:
            self.tasks.setdefault(work.spec.task_id, SparkTask(work.spec.task_id)).fail(error, now)
            for tp in work.spec.partitions:
                self.positions.pop(tp, None)

    async def stop(self) -> None:
        if self._source is not None:
            with contextlib.suppress(Exception):
                await self._source.close()
            self._source = None
        with self._lock:
            self.state = "STOPPED"
            for task in self.tasks.values():
                if task.state == "RUNNING":
                    task.state = "STOPPED"

    def status(self) -> dict[str, Any]:
        """The same shape as the in-process ``FlowRunner.status()``."""
        with self._lock:
            tasks = [{
                "id": task_id, "state": t.state, "trace": t.trace,
                "partitions": [str(tp) for tp in t.partitions],
                "batches": t.metrics.batches, "records": t.metrics.records, "bytes": t.metrics.bytes,
                "rebuilt_batches": t.metrics.rebuilt_batches, "syncs": t.metrics.syncs,
                "lag": sum(t.metrics.lag.values()),
            } for task_id, t in sorted(self.tasks.items())]
            return {
                "name": self.name, "state": self.state, "trace": self.trace,
                "topics": dict(self.last_plan.topics) if self.last_plan else {},
                "tasks": tasks,
            }


class SparkWorker:
    """All enabled flows of one configuration: controllers and heartbeats on the driver, tasks on
    Spark executors, one Spark job per round for all flows."""

    def __init__(
        self,
        config: MirrorMakerConfig,
        *,
        master: str | None = None,
        spark: Any = None,
        spark_conf: Mapping[str, str] | None = None,
        round_seconds: float = 10.0,
        idle_seconds: float = 0.5,
        commit_interval: float = 1.0,
    ) -> None:
        from connectors.heartbeat import HeartbeatEmitter

        self.config = config
        self.flows = {
            f.name: SparkFlowRunner(f, round_seconds=round_seconds, commit_interval=commit_interval)
            for f in config.enabled_flows()
        }
        self.heartbeats = {
            f.name: HeartbeatEmitter(f)
            for f in config.heartbeat_flows()
            if f.emit_heartbeats_enabled and f.emit_heartbeats_interval_seconds >= 0
        }
        if master is None and spark is None:
            import os

            if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
                master = default_master(sum(f.tasks_max for f in config.enabled_flows()))
        self.master = master
        self.spark_conf = dict(spark_conf or {})
        self.spark = spark
        self._owns_spark = spark is None
        self.idle_seconds = idle_seconds
        self.rounds = 0
        self.failed_jobs = 0
        self.last_job_error: str | None = None
        self._beats_stop = asyncio.Event()
        self._beats: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._beats = [asyncio.create_task(h.run(self._beats_stop)) for h in self.heartbeats.values()]
        if self.spark is None:
            # off the main thread, so pyspark leaves the process's SIGINT handling alone
            self.spark = await asyncio.to_thread(spark_session, self.master, self.spark_conf)
            log.info("Spark runtime: master %s", self.spark.sparkContext.master)
        await asyncio.gather(*(f.start() for f in self.flows.values()))

    async def run_round(self) -> list[RoundResult]:
        """Refresh what is due, plan, run one Spark job and fold in its results."""
        now = time.monotonic()
        work: list[RoundWork] = []
        for flow in self.flows.values():
            try:
                if flow.refresh_due(now):
                    await flow.refresh()
                work.extend(await flow.plan(now))
            except Exception as exc:  # a cluster unreachable right now: that flow sits this round out
                log.warning("%s: planning the round failed (%s); retrying", flow.name, exc)
        if not work:
            return []
        self.rounds += 1
        try:
            results = await asyncio.to_thread(self._collect, work)
        except Exception as exc:
            self.failed_jobs += 1
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            self.last_job_error = f"{type(exc).__name__}: {first}"[:1000]
            log.error("Spark round %d failed: %s; its tasks run again from their committed progress",
                      self.rounds, self.last_job_error)
            for w in work:
                self.flows[w.flow].fail_round(w, self.last_job_error, time.monotonic())
            return []
        done = time.monotonic()
        for result in results:
            self.flows[result.flow].absorb(result, done)
        return results

    def _collect(self, work: list[RoundWork]) -> list[RoundResult]:
        sc = self.spark.sparkContext
        sc.setJobDescription(f"mm2py round {self.rounds}: {len(work)} tasks")
        results: list[RoundResult] = sc.parallelize(work, len(work)).map(run_round).collect()
        return results

    async def run(self, stop: asyncio.Event, status_interval: float = 30.0) -> None:
        """Start, run rounds until ``stop`` is set (the round under way finishes), stop."""
        try:
            await self.start()
            next_status = time.monotonic() + status_interval
            while not stop.is_set():
                results = await self.run_round()
                if not results or all(r.complete for r in results):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.idle_seconds)
                if time.monotonic() >= next_status:
                    next_status = time.monotonic() + status_interval
                    for line in self.status_lines():
                        log.info("%s", line)
        finally:
            await self.stop()

    def run_blocking(self, stop: threading.Event, status_interval: float = 30.0) -> None:
        """:meth:`run` for callers without an event loop: stops when ``stop`` is set."""

        async def main() -> None:
            done = asyncio.Event()

            async def watch() -> None:
                while not stop.is_set():
                    await asyncio.sleep(0.1)
                done.set()

            watcher = asyncio.create_task(watch())
            try:
                await self.run(done, status_interval)
            finally:
                watcher.cancel()

        asyncio.run(main())

    async def stop(self) -> None:
        self._beats_stop.set()
        await asyncio.gather(*(f.stop() for f in self.flows.values()), *self._beats, return_exceptions=True)
        if self._owns_spark and self.spark is not None:
            spark, self.spark = self.spark, None
            await asyncio.to_thread(spark.stop)

    def status_lines(self) -> list[str]:
        """One line per flow: what runs and how far it got."""
        lines = []
        for name, flow in self.flows.items():
            st = flow.status()
            tasks = st["tasks"]
            states = sorted({t["state"] for t in tasks}) or ["no tasks"]
            lines.append(
                f"{name}: {len(st['topics'])} topics, {sum(len(t['partitions']) for t in tasks)} partitions, "
                f"{sum(t['records'] for t in tasks):,} records / {sum(t['bytes'] for t in tasks):,} bytes "
                f"mirrored, {sum(t['lag'] for t in tasks):,} behind, tasks {'/'.join(states)}, "
                f"{self.rounds} Spark rounds ({self.failed_jobs} failed)"
            )
        return lines


def run_spark(
    config: MirrorMakerConfig,
    stop: threading.Event,
    *,
    master: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    round_seconds: float = 10.0,
    commit_interval: float = 1.0,
) -> SparkWorker:
    """Run every enabled flow of ``config`` on Spark until ``stop`` is set; returns the stopped
    worker (its ``status_lines()`` tell how far it got). ``master=None``: embedded ``local[N]``
    (N = total ``tasks.max``), or spark-submit's master when launched by spark-submit."""
    worker = SparkWorker(config, master=master, spark_conf=spark_conf, round_seconds=round_seconds,
                         commit_interval=commit_interval)
    worker.run_blocking(stop)
    return worker
