"""The Spark runtime's worker: the driver is every flow's controller, executors run the tasks.

By default the executors run each task continuously as a lease (:mod:`.lease_scheduler`: the
driver's lease loop; :mod:`mm2py.runtime.spark.executor.lease`: what a lease runs), handed over to
a successor every ``--spark-lease-seconds``, and leases are placed on mirror hosts: one long-lived
Spark job per executor (:mod:`.host_pool`, :mod:`mm2py.runtime.spark.executor.host`) running all
of its leases in one process, with one fetch session per source broker. ``--spark-mode
lease-jobs`` runs each lease as a Spark job of its own instead (a process, sessions and a Spark
slot per lease, and one more per successor); ``--spark-mode rounds`` runs bounded rounds.

The driver does what the in-process runtime's controller does — the same
:class:`~mm2py.runtime.flows.FlowRunnerBase` (controller, internal topics, a topic refresh every
``refresh.topics.interval.seconds``), heartbeats. In rounds mode it reads the source end offsets of
every assigned partition, plans one :class:`~mm2py.runtime.spark.executor.round.RoundWork` per task
with something to mirror (:func:`~mm2py.runtime.spark.driver.round_plan.plan_round`), runs them as
one Spark job (one Spark task per mirror task) and folds the results into per-task state and
metrics. A task's round starts from its committed progress, so a round that failed (reported back,
never swallowed) is simply run again next round, after a short back-off. Rounds are sequential and
a partition belongs to one task per round, so one writer per target partition holds without
hand-over: a partition that moves simply goes with the next round's task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Mapping
from typing import Any

from mm2py.config.errors import ConfigError
from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.engine.scheduler import Scheduler, sleep_or_stop
from mm2py.protocol.compression import CodecCounters
from mm2py.runtime.flows import Claims
from mm2py.runtime.host_figures import HostFigures
from mm2py.runtime.spark.driver.flow_runner import SparkFlowRunner, SparkTask
from mm2py.runtime.spark.driver.lease_scheduler import LeaseScheduler, LeaseSettings
from mm2py.runtime.spark.driver.session import default_master, is_local, job_error, spark_session
from mm2py.runtime.spark.executor.host import HostResult, HostWork, run_host
from mm2py.runtime.spark.executor.lease import LeaseResult, LeaseWork, run_lease
from mm2py.runtime.spark.executor.round import RoundResult, RoundWork, run_round
from mm2py.runtime.steering import FlowStateError
from mm2py.runtime.worker_base import WorkerBase

__all__ = ["MODES", "SparkFlowRunner", "SparkTask", "SparkWorker", "run_spark"]

#: ``leases`` (on mirror hosts), ``lease-jobs`` (a Spark job per lease), ``rounds``
MODES = ("leases", "lease-jobs", "rounds")

log = logging.getLogger(__name__)

#: how often the driver counts Spark's executors again (one mirror host each; a call into the
#: JVM): every ``EARLY_RECOUNT_S`` for its first ``EARLY_S`` (the executors register), then every
#: ``EXECUTOR_RECOUNT_S``
EXECUTOR_RECOUNT_S = 10.0
EARLY_RECOUNT_S = 2.0
EARLY_S = 60.0


class SparkWorker(WorkerBase[SparkFlowRunner]):
    """All enabled flows of one configuration: controllers and heartbeats on the driver, tasks on
    Spark executors, one Spark job per round for all flows. Flows can be added, changed, restarted,
    paused, stopped, resumed, repositioned and removed while it runs (REST), as with the in-process
    ``Worker``."""

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
        state_file: str | None = None,
        mode: str = "leases",
        leases: LeaseSettings | None = None,
        hosts: int | None = None,
    ) -> None:
        """``hosts``: how many mirror hosts carry the leases (None: one per Spark executor)."""
        if mode not in MODES:
            raise ConfigError(f"Spark mode must be one of {', '.join(MODES)}, not {mode!r}")
        if hosts is not None and hosts < 1:
            raise ConfigError(f"the number of mirror hosts must be at least 1, not {hosts}")
        super().__init__(config, state_file)
        config = self.config
        self.mode = mode
        self.lease_settings = leases or LeaseSettings(commit_interval=commit_interval)
        self.leases: LeaseScheduler | None = None
        self.hosts = hosts
        self._executors = (1, -math.inf)  # executors Spark has, and when it was asked
        self._first_count: float | None = None  # when the executors were first counted
        self.round_seconds = round_seconds
        self.commit_interval = commit_interval
        self.flows = self._initial_runners()
        if master is None and spark is None:
            import os

            if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
                tasks = sum(r.flow.tasks_max for r in self.flows.values())
                # leases: a slot for the host (and one for a host that replaces it); lease-jobs: a
                # slot for each task's lease and one for its successor; rounds: one per task
                master = default_master({"leases": 2, "lease-jobs": 2 * tasks}.get(mode, tasks))
        self.master = master
        self.spark_conf = dict(spark_conf or {})
        self.spark = spark
        self._owns_spark = spark is None
        self.idle_seconds = idle_seconds
        self.rounds = 0
        self._round_lock = asyncio.Lock()  # a halt waits for the round under way
        self.halt_timeout = 2 * self.lease_settings.fence_seconds + 30.0
        self.failed_jobs = 0
        self.last_job_error: str | None = None

    async def _halt_tasks(self, runner: SparkFlowRunner) -> None:
        """Pause or stop a flow: its leases stop (each commits and releases its partitions) and
        none is granted while it stays halted (the lease table fences it); in rounds mode, the
        round under way ends first. Waits until no lease of it holds a partition, up to
        ``halt_timeout`` seconds (its offsets cannot be changed before that)."""
        if self.leases is not None:
            self.leases.halt(runner.name)
        async with self._round_lock:  # rounds: plans no more work for it once stopped
            await runner.stop()
        if self.leases is not None and not await self.leases.released(runner.name, self.halt_timeout):
            log.warning("%s: some leases still hold partitions %.0fs after the halt; they are "
                        "fenced, and its offsets can be changed once they end",
                        runner.name, self.halt_timeout)

    def _check_no_writers(self, name: str) -> None:
        if self.leases is not None and self.leases.writing(name):
            raise FlowStateError(
                f"flow {name!r} is STOPPED but a lease of it still holds partitions (not yet "
                "released or fenced); try again in a few seconds")

    def _new_runner(self, flow: FlowConfig, claims: Claims) -> SparkFlowRunner:
        return SparkFlowRunner(flow, round_seconds=self.round_seconds, commit_interval=self.commit_interval,
                               claims=claims)

    async def start(self) -> None:
        self.startup.begin()
        # the session starts while the controllers create topics; off the main thread, so that
        # pyspark leaves the process's SIGINT handling alone
        session = None if self.spark is not None else asyncio.to_thread(
            spark_session, self.master, self.spark_conf)
        flows = self.startup.start_flows(self._runnable())
        if session is not None:
            started = await asyncio.gather(session, flows, return_exceptions=True)
            if not isinstance(started[0], BaseException):
                self.spark = started[0]
                log.info("Spark runtime: master %s", self.spark.sparkContext.master)
            for outcome in started:
                if isinstance(outcome, BaseException):
                    raise outcome
        else:
            await flows
        if self.mode != "rounds":
            host = self.spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1")
            # each lease (or host) blocks a thread; flows added over REST need more: plenty of room
            jobs = max(64, 4 * sum(f.flow.tasks_max for f in self.flows.values()))
            on_hosts = self.mode == "leases"
            self.leases = LeaseScheduler(self.flows, self._collect_lease, self.lease_settings,
                                         host=host, max_jobs=jobs, on_job_failed=self._job_failed,
                                         halted=self.halted,
                                         collect_host=self._collect_host if on_hosts else None,
                                         wanted_hosts=self._wanted_hosts,
                                         failed_host_attempts=self._failed_host_attempts)
            await self.leases.start()

    def _job_failed(self, error: str) -> None:
        self.last_job_error = error
        self.failed_jobs += 1

    def _collect_lease(self, work: LeaseWork) -> LeaseResult:
        """One lease as one Spark job with one Spark task (blocks for the whole lease)."""
        sc = self.spark.sparkContext
        sc.setJobGroup(work.lease_id, f"mm2py lease {work.lease_id}", interruptOnCancel=True)
        results: list[LeaseResult] = sc.parallelize([work], 1).map(run_lease).collect()
        return results[0]

    def _collect_host(self, work: HostWork) -> HostResult:
        """One mirror host as one Spark job with one Spark task (blocks while the host runs)."""
        sc = self.spark.sparkContext
        sc.setJobGroup(work.host_id, f"mm2py mirror host {work.host_id}", interruptOnCancel=True)
        results: list[HostResult] = sc.parallelize([work], 1).map(run_host).collect()
        return results[0]

    def _failed_host_attempts(self, host_id: str) -> int:
        """The failed attempts of mirror host ``host_id``'s Spark task so far, while its job runs
        on (SPARK_GAVE_UP: an executor lost fails the attempt running on it, and Spark runs the
        task again, not counting that failure against ``spark.task.maxFailures``); 0 once the job
        has ended, as one does when the attempt's failure counts (a Python worker that crashed):
        its error then says why."""
        failed = 0
        with contextlib.suppress(Exception):  # no Spark session (any more): none counted
            tracker = self.spark.sparkContext.statusTracker()
            for job_id in tracker.getJobIdsForGroup(host_id):
                job = tracker.getJobInfo(job_id)
                if job is None:
                    continue
                if str(job.status) != "RUNNING":
                    return 0
                for stage_id in job.stageIds:
                    stage = tracker.getStageInfo(stage_id)
                    failed += stage.numFailedTasks if stage is not None else 0
        return failed

    def _wanted_hosts(self) -> int:
        """One mirror host per Spark executor (``local[N]`` is one executor), or ``hosts``; the
        executors are counted again every ``EARLY_RECOUNT_S``, later every ``EXECUTOR_RECOUNT_S``
        (executors join and leave a cluster; at the start the first count often comes before the
        second executor registered, and counted 10 s later its host took leases over by moving
        them, after the catch-up)."""
        if self.hosts is not None:
            return self.hosts
        sc = self.spark.sparkContext if self.spark is not None else None
        if sc is None or is_local(sc.master):
            return 1
        count, when = self._executors
        now = time.monotonic()
        if self._first_count is None:
            self._first_count = now
        early = now - self._first_count < EARLY_S
        if now - when >= (EARLY_RECOUNT_S if early else EXECUTOR_RECOUNT_S):
            with contextlib.suppress(Exception):  # the driver's own entry is one of them
                count = max(1, len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1)
            self._executors = (count, time.monotonic())
        return count

    async def run_round(self) -> list[RoundResult]:
        """Plan, run one Spark job and fold in its results (a halt waits for it)."""
        async with self._round_lock:
            return await self._run_round()

    async def _run_round(self) -> list[RoundResult]:
        now = time.monotonic()
        work: list[RoundWork] = []
        for flow in list(self.flows.values()):  # REST may add or remove flows meanwhile
            if flow.name in self.halted:
                continue
            try:  # (the flow's topic refresh runs on its own schedule: FlowRunnerBase)
                work.extend(await flow.plan(now))
            except Exception as exc:  # a cluster unreachable right now: that flow sits this round out
                log.warning("%s: planning the round failed (%s); retrying", flow.name, exc)
        if not work:
            return []
        self.rounds += 1
        try:
            results = await asyncio.to_thread(self._collect, work)
        except Exception as exc:
            error = job_error(exc)
            log.error("Spark round %d failed: %s; its tasks run again from their committed progress",
                      self.rounds, error)
            for w in work:
                if w.flow in self.flows:
                    self.flows[w.flow].fail_round(w, error, time.monotonic())
            # counted last: a reader (status, metrics, another thread) that sees the failed job
            # also sees its tasks marked failed
            self.last_job_error = error
            self.failed_jobs += 1
            return []
        done = time.monotonic()
        for result in results:
            if result.flow in self.flows:
                self.flows[result.flow].absorb(result, done)
        return results

    def _collect(self, work: list[RoundWork]) -> list[RoundResult]:
        sc = self.spark.sparkContext
        sc.setJobDescription(f"mm2py round {self.rounds}: {len(work)} tasks")
        results: list[RoundResult] = sc.parallelize(work, len(work)).map(run_round).collect()
        return results

    async def run(self, stop: asyncio.Event, status_interval: float = 30.0) -> None:
        """Start, run rounds (or lease steps) until ``stop`` is set (the one under way finishes),
        stop. The status lines, and in lease mode the lease step, are jobs of the worker's
        scheduler; rounds run back to back while there is work, ``idle_seconds`` apart when not."""
        try:
            await self.start()
            jobs = Scheduler("worker", stop)
            jobs.every("status lines", status_interval, self._log_status, delay=status_interval)
            if self.leases is not None:
                jobs.every("lease step", self.idle_seconds, self.leases.step, quiet=True)
                await jobs.run()
                return
            status = asyncio.create_task(jobs.run())
            try:
                await self._run_rounds(stop)
            finally:
                status.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await status
        finally:
            await self.stop()

    async def _run_rounds(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            results = await self.run_round()
            if not results or all(r.complete for r in results):
                await sleep_or_stop(stop, self.idle_seconds)

    async def _log_status(self) -> None:
        for line in self.status_lines():
            log.info("%s", line)

    def run_blocking(self, stop: threading.Event, status_interval: float = 30.0) -> None:
        """:meth:`run` for callers without an event loop: stops when ``stop`` is set (a job of
        its own scheduler looks every 0.1 s)."""

        async def main() -> None:
            done = asyncio.Event()

            async def watch() -> None:
                if stop.is_set():
                    done.set()

            watcher = Scheduler("worker", done)
            watcher.every("watch stop", 0.1, watch, quiet=True)
            watching = asyncio.create_task(watcher.run())
            try:
                await self.run(done, status_interval)
            finally:
                watching.cancel()

        asyncio.run(main())

    async def stop(self) -> None:
        if self.leases is not None:
            await self.leases.stop()
        beats = await self.startup.stop()
        await asyncio.gather(*(f.stop() for f in self.flows.values()), *beats, return_exceptions=True)
        await self.state_file.written()  # active topics its leases reported while stopping
        if self._owns_spark and self.spark is not None:
            spark, self.spark = self.spark, None
            if self.leases is not None:
                self.leases.abandon()
            await asyncio.to_thread(spark.stop)

    def codec_operations(self) -> tuple[int, int]:
        d, c = CodecCounters.snapshot()
        if self.leases is not None:
            ed, ec = self.leases.codec_operations()
            d, c = d + ed, c + ec
        return d, c

    def host_figures(self) -> list[HostFigures]:
        """The mirror hosts' own figures (``/metrics``: ``mm2py_host_*``)."""
        hosts = self.leases.hosts if self.leases is not None else None
        return hosts.figures() if hosts is not None else []

    def _status_suffix(self) -> str:
        if self.leases is not None:
            hosts = self.leases.hosts
            on = f" on {hosts.running()} mirror hosts" if hosts is not None else ""
            return (f", {self.leases.leases_running()} Spark leases running{on} "
                    f"({self.leases.started} started, {self.failed_jobs} Spark jobs failed)")
        return f", {self.rounds} Spark rounds ({self.failed_jobs} failed)"


def run_spark(
    config: MirrorMakerConfig,
    stop: threading.Event,
    *,
    master: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    round_seconds: float = 10.0,
    commit_interval: float = 1.0,
    mode: str = "leases",
    leases: LeaseSettings | None = None,
    hosts: int | None = None,
) -> SparkWorker:
    """Run every enabled flow of ``config`` on Spark until ``stop`` is set; returns the stopped
    worker (its ``status_lines()`` tell how far it got). ``master=None``: embedded ``local[N]``
    (N = total ``tasks.max``), or spark-submit's master when launched by spark-submit."""
    worker = SparkWorker(config, master=master, spark_conf=spark_conf, round_seconds=round_seconds,
                         commit_interval=commit_interval, mode=mode, leases=leases, hosts=hosts)
    worker.run_blocking(stop)
    return worker
