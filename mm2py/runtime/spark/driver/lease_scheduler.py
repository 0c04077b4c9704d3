"""The Spark driver's lease loop: which leases to start and stop, and what their reports mean.

:class:`LeaseScheduler` turns each flow's task assignment into leases (see :mod:`.lease_table`):

- a task with partitions and no lease gets one, placed on a mirror host (:mod:`.host_pool`: one
  long-lived Spark job per executor running many leases in one process), or, with ``lease-jobs``,
  run as a Spark job of its own (:func:`mm2py.runtime.spark.executor.lease.run_lease`);
- a lease that has run ``lease_seconds`` gets a successor for the same partitions, started while
  it still mirrors, so the hand-over costs one GO message rather than a Spark job start-up; on
  hosts only when the successor would run on another, lighter host (``renew_in_place``: on its
  own host too, the hand-over then inside that host's process), and at once, whatever its age,
  when another host is lighter than its own and no other hand-over is under way;
- a task whose partitions changed (new topics, partition growth, a REST allow/deny change, a task
  that went away) gets a lease for its new partitions at once; older leases that hold any of those
  partitions are stopped by the table when it is ready, and a lease none of whose partitions is
  still wanted is stopped right away;
- a lease that failed (reported, or its Spark job failed) is counted against its task, which gets
  its next lease after a back-off, from the committed progress (the table fences the old one first);
- a paused or stopped flow (the worker's ``halted``) gets no lease: :meth:`LeaseScheduler.halt`
  stops its leases (each commits and releases) and :meth:`LeaseScheduler.released` waits for
  them; when the flow resumes, its next leases load the committed, perhaps moved, positions.

Reports from running leases are folded into the driver's :class:`~.spark_flow.SparkTask` as they
arrive, so ``/metrics`` and ``status()`` show executor work (records, bytes, batches, lag, codec
operations, rebuilt batches) while a lease runs, not only when it ends.

Spark jobs of leases (and of hosts) run in their own thread pool: each blocks one thread
(``collect``) for the whole lease, and must not starve the default executor the controllers'
blocking calls use.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mm2py.config.models import FlowConfig
from mm2py.engine.task_contract import RUN_COUNTERS, TaskMetrics, TaskSpec
from mm2py.runtime.spark.driver.flow_runner import SparkFlowRunner, SparkTask
from mm2py.runtime.spark.driver.host_pool import HostPool
from mm2py.runtime.spark.driver.lease_book import LeaseBook
from mm2py.runtime.spark.driver.lease_coordinator import LeaseCoordinator
from mm2py.runtime.spark.driver.lease_table import Lease, LeaseState, LeaseTable
from mm2py.runtime.spark.driver.session import job_error
from mm2py.runtime.spark.executor.host import HostResult, HostWork
from mm2py.runtime.spark.executor.lease import LeaseResult, LeaseWork
from mm2py.runtime.spark.lease_messages import Ended, Report

log = logging.getLogger(__name__)

__all__ = ["LeaseScheduler", "LeaseSettings"]

@dataclass(frozen=True)
class LeaseSettings:
    lease_seconds: float = 60.0  # a lease hands over to a successor after this long
    commit_interval: float = 1.0
    #: how often a lease reports, at most a quarter of the fence (decoding the reports was most of
    #: the driver's event loop at 2,000 partitions: twice a second cost it about 3 CPU s a minute)
    report_interval: float = 1.0
    fence_seconds: float = 4.0  # a lost executor's partitions are leased again within 2x this
    ready_timeout: float = 15.0  # a successor Spark cannot place this long: stop its predecessor
    #: on mirror hosts, renew a lease every ``lease_seconds`` even where its successor would run on
    #: the same host (off: a lease there runs until it moves, its partitions change or it stops;
    #: an in-place renewal gains nothing and costs a task build, a producer id and, as after any
    #: task start, an offset sync for each partition at its next record)
    renew_in_place: bool = False


def paced_as_one(flow: FlowConfig, partitions: int) -> FlowConfig:
    """HOSTS_PACE_AS_ONE: the flow as mirror hosts run it, each pacing its fetch sessions as though
    it held all of the flow's ``partitions`` (``mm2py.fetch.linger.partitions.min``). A host paces
    by its own partition count, and a source broker reads every partition of a session at each
    fetch: unscaled, n hosts of 1/n of the partitions each would fetch n times as often, the
    brokers reading n times the partitions a second of one process (two hosts of 1,000 partitions:
    63 Fetch/s against 15). It depends on the flow alone, not on how many hosts run now (counted
    again as executors join): every lease of the flow carries the same configuration, so its
    leases on a host share one set of clients, one fetch session (SHARED_UNTIL_LAST). Scaled by
    the host count instead, leases placed before the second executor was counted kept a session
    paced for one host beside the later leases' (52 Fetch/s where one process sends 18)."""
    return flow.model_copy(update={"fetch_linger_partitions_min": partitions})


class LeaseScheduler:
    """Leases for every flow of a Spark worker (see the module docstring)."""

    def __init__(
        self, flows: Mapping[str, SparkFlowRunner], collect: Callable[[LeaseWork], LeaseResult],
        settings: LeaseSettings, *, host: str = "127.0.0.1", max_jobs: int = 8,
        on_job_failed: Callable[[str], None] | None = None, halted: Mapping[str, str] | None = None,
        collect_host: Callable[[HostWork], HostResult] | None = None,
        wanted_hosts: Callable[[], int] = lambda: 1,
        failed_host_attempts: Callable[[str], int] = lambda host_id: 0,
    ) -> None:
        """``collect_host``: runs a mirror host as a Spark job; given, leases are placed on hosts
        (``wanted_hosts`` of them) instead of each running as a Spark job through ``collect``."""
        self.flows = flows  # the worker's dict: REST adds, replaces and removes flows in it
        self.halted = halted if halted is not None else {}  # the worker's paused and stopped flows
        self.collect = collect  # runs one lease as a Spark job (blocking), returns its result
        self.settings = settings
        self.table = LeaseTable(fence_seconds=settings.fence_seconds, ready_timeout=settings.ready_timeout)
        self.coordinator = LeaseCoordinator(self.table, host=host, on_report=self._on_report)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_jobs, thread_name_prefix="mm2py-lease")
        self._jobs: dict[str, asyncio.Task[None]] = {}  # lease id -> its Spark job
        #: lease id -> the flow runner it works for, while the lease has not ended
        self._runner_of: dict[str, SparkFlowRunner] = {}
        self._replaced: set[str] = set()  # flows whose old leases must end before new ones start
        self._books: dict[tuple[str, int], LeaseBook] = {}
        self.on_job_failed = on_job_failed  # a lease's Spark job failed (not a reported failure)
        #: the mirror hosts leases are placed on (None: a Spark job per lease)
        self.hosts: HostPool | None = None
        if collect_host is not None:
            self.hosts = HostPool(self.coordinator, collect_host, self._pool, wanted_hosts,
                                  self._lost_on_host, failed_host_attempts)
            self.coordinator.on_ended = self._on_ended
        #: lease id -> its flow runner, task and work, while placed on a host and not ended
        self._placed: dict[str, tuple[SparkFlowRunner, SparkTask, LeaseWork]] = {}
        self.started = 0
        #: some lease is starting, waiting or stopping (this step): no lease moves hosts meanwhile
        self._handing_over = False
        self.steps = 0  # steps of the driver's loop so far

    async def start(self) -> None:
        await self.coordinator.start()

    # -- one step of the driver's loop ----------------------------------------------------------
    async def step(self) -> None:
        """Start or stop leases so every task is covered (each flow's topic refresh runs on its
        own scheduler, see runtime.flows)."""
        self.steps += 1
        if self.hosts is not None:
            self.hosts.keep(time.monotonic())
        for name in set(self.halted) - self.table.halted:
            self.halt(name)
        for name in self.table.halted - set(self.halted):
            self.table.resume(name)  # its next leases load the committed positions
        active = {x.lease_id for x in self._active()}
        for lease_id in [k for k in self._runner_of if k not in active]:
            del self._runner_of[lease_id]
        for name in {lease.flow for lease in self._active()} - set(self.flows):
            self._stop_flow(name, "the flow was removed")
        for lease, why in self.table.lost:
            log.info("%s task %d: lease %s given up (%s)%s", lease.flow, lease.task_id, lease.lease_id,
                     why, "" if lease.flow in self.table.halted else "; a new lease takes its partitions")
        self.table.lost.clear()
        self._handing_over = self._hand_over_under_way()
        for flow in list(self.flows.values()):
            self._cover(flow, time.monotonic())
        self.table.prune()

    def halt(self, name: str) -> None:
        """Flow ``name`` is paused or stopped: its leases stop (commit, release), none starts."""
        self.coordinator.dispatch(self.table.halt(name, "the flow is paused or stopped"))

    def writing(self, name: str) -> bool:
        """Whether a lease of flow ``name`` still holds partitions (it may still write)."""
        return self.table.writing(name)

    async def released(self, name: str, timeout: float) -> bool:
        """Wait until no lease of flow ``name`` holds a partition: each released its partitions
        (committed) or was fenced. False if some still did after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self.table.writing(name):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def _active(self) -> list[Lease]:
        return [x for x in self.table.leases.values() if not x.state.ended]

    def _stop_flow(self, name: str, reason: str) -> None:
        for lease in self._active():
            if lease.flow == name:
                self.coordinator.stop(lease.lease_id, reason)

    def _cover(self, flow: SparkFlowRunner, now: float) -> None:
        stale = [x for x in self._active()
                 if x.flow == flow.name and self._runner_of.get(x.lease_id) is not flow]
        if stale:  # the flow was replaced: its old leases end before the new ones start
            for lease in stale:
                self.coordinator.stop(lease.lease_id, "the flow was reconfigured")
            self._replaced.add(flow.name)
            return
        if flow.name in self._replaced:
            # positions the old configuration's leases carried over are not the new one's to trust
            self.table.forget_flow(flow.name)
            self._replaced.discard(flow.name)
        if flow.state != "RUNNING" or flow.name in self.table.halted:
            return
        for task in list(flow.tasks.values()):
            self._cover_task(flow, task, now)

    def _cover_task(self, flow: SparkFlowRunner, task: SparkTask, now: float) -> None:
        want = frozenset(task.partitions)
        current = self.table.current(flow.name, task.task_id)
        for lease in current:  # holds nothing the task still wants: nothing to hand over
            if not lease.partitions & want:
                self.coordinator.stop(lease.lease_id, "its partitions were reassigned")
        if not want or task.retry_at > now:
            return
        newest = current[-1] if current else None
        if self.hosts is not None and self.hosts.pick() is None:
            return  # no mirror host connected yet
        if newest is None or newest.partitions != want:
            if newest is not None and newest.state in (LeaseState.STARTING, LeaseState.WAITING):
                self.coordinator.stop(newest.lease_id, "superseded before it was granted")
            self._start(flow, task, want, now, newest.lease_id if newest is not None else None)
        elif newest.state is LeaseState.RUNNING:
            renew = ((self.hosts is None or self.settings.renew_in_place)
                     and now - newest.started >= self.settings.lease_seconds)
            if renew or self._on_lost_host(newest.lease_id) or self._lighter_host_for(newest.lease_id):
                self._start(flow, task, want, now, newest.lease_id)

    def _hand_over_under_way(self) -> bool:
        """A lease is starting, waiting or stopping, or has released but its host still counts it
        (no ENDED yet)."""
        if any(x.state is not LeaseState.RUNNING for x in self._active()):
            return True
        placed = self.hosts.placed_ids() if self.hosts is not None else ()
        return any(lease_id not in self.table.leases
                   or self.table.leases[lease_id].state is not LeaseState.RUNNING for lease_id in placed)

    def _on_lost_host(self, lease_id: str) -> bool:
        """HOST_LOST: the lease's host hung up or ended, and a live host can take it. Its successor
        starts there now, whatever else hands over: every lease of a lost host has its successor
        built and waiting when the lease is given up (not one at a time, each after the last was
        granted), and a lease that cannot stay where it is is no move that could go back."""
        if self.hosts is None:
            return False
        host = self.hosts.host_of(lease_id)
        return host is not None and not host.live and self.hosts.pick(lease_id) is not None

    def _lighter_host_for(self, lease_id: str) -> bool:
        """ONE_MOVE_AT_A_TIME: a host carries less than the lease's own would without it
        (PLACE_LIGHTEST: a host that joined, or one whose leases ended), and no lease is starting,
        waiting or stopping anywhere: the lease moves there now, not at its renewal. Each such
        move lowers the sum of the squared loads, so moves stop once the hosts are even; a move
        decided while another hands over would count that one on both hosts and send leases back
        and forth (each move a task start: a new producer id, an offset sync per partition)."""
        if self.hosts is None or self._handing_over:
            return False
        host = self.hosts.host_of(lease_id)
        return host is not None and self.hosts.pick(lease_id) is not host

    def _start(self, flow: SparkFlowRunner, task: SparkTask, partitions: frozenset[Any], now: float,
               succeeds: str | None = None) -> None:
        host = None
        if self.hosts is not None:
            host = self.hosts.pick(succeeds)
            if host is None:
                return
        lease = self.table.start(flow.name, task.task_id, partitions, now)
        s = self.settings
        config = flow.flow if self.hosts is None else paced_as_one(flow.flow, flow.partition_count())
        work = LeaseWork(
            TaskSpec(config, task.task_id, tuple(sorted(partitions))), lease.lease_id,
            self.coordinator.address, self.coordinator.token, commit_interval=s.commit_interval,
            report_interval=min(s.report_interval, s.fence_seconds / 4), fence_seconds=s.fence_seconds,
            # a lease the driver forgets to stop (or cannot reach) still ends and commits; on a host
            # a lease runs until it moves or stops (a driver it cannot hear fences it)
            max_seconds=(math.inf if host is not None and not s.renew_in_place
                         else max(4 * s.lease_seconds, s.lease_seconds + 60)),
        )
        self._runner_of[lease.lease_id] = flow
        self.started += 1
        self._handing_over = True
        if host is not None and self.hosts is not None:
            self._placed[lease.lease_id] = (flow, task, work)
            if not self.hosts.place(host, work):
                self._lost_on_host(lease.lease_id, f"its mirror host {host.host_id} hung up")
        else:
            self._jobs[lease.lease_id] = asyncio.create_task(self._job(flow, task, work))
        # on a mirror host a lease runs until it moves (INFO: which process mirrors what); a lease
        # run as its own Spark job is renewed every lease interval (DEBUG)
        where, level = "", logging.DEBUG
        if host is not None:
            where = f" on mirror host {host.host_id} ({host.line.executor if host.line else '?'})"
            level = logging.INFO
        log.log(level, "%s task %d: lease %s started for %d partitions%s", flow.name, task.task_id,
                lease.lease_id, len(partitions), where)

    async def _job(self, flow: SparkFlowRunner, task: SparkTask, work: LeaseWork) -> None:
        loop = asyncio.get_running_loop()
        result: LeaseResult | None = None
        error: str | None = None
        try:
            result = await loop.run_in_executor(self._pool, self.collect, work)
        except Exception as exc:
            error = job_error(exc)
        finally:
            self._jobs.pop(work.lease_id, None)
            self._finish(flow, task, work.lease_id, result, error)

    def _finish(self, flow: SparkFlowRunner, task: SparkTask, lease_id: str, result: LeaseResult | None,
                error: str | None) -> None:
        """A lease's run ended: with its ``result``, or lost with ``error`` (its Spark job failed,
        its host went away) before it said how it ended."""
        book = self._books.setdefault((flow.name, task.task_id), LeaseBook())
        if error is not None:
            log.error("%s task %d: lease %s failed in Spark: %s; its partitions resume from the "
                      "committed progress", flow.name, task.task_id, lease_id, error)
            flow.fail_task(task.task_id, error, time.monotonic())
            if self.on_job_failed is not None:  # after the task is marked failed
                self.on_job_failed(error)
        book.end(lease_id, result)
        book.fold(task)
        self.coordinator.job_done(lease_id)
        if result is not None:
            flow.absorb_lease(result, time.monotonic())

    def _on_ended(self, msg: Ended) -> None:
        """A lease ended on its host (ENDED): what its own Spark job would have returned."""
        if self.hosts is None or not self.hosts.ended(msg.lease):
            return
        placed = self._placed.pop(msg.lease, None)
        if placed is None:
            return
        flow, task, work = placed
        metrics = TaskMetrics()
        for name in RUN_COUNTERS:
            setattr(metrics, name, msg.metrics.get(name, 0))
        metrics.times = dict(msg.times)
        result = LeaseResult(work.flow, work.spec.task_id, work.lease_id, tuple(work.spec.partitions),
                             granted=msg.granted, positions=dict(msg.positions), metrics=metrics,
                             codec=msg.codec, error=msg.error, halted=msg.halted,
                             warnings=list(msg.warnings), seconds=msg.seconds, executor=msg.executor)
        self._finish(flow, task, work.lease_id, result, None)

    def _lost_on_host(self, lease_id: str, why: str) -> None:
        placed = self._placed.pop(lease_id, None)
        if placed is not None:
            flow, task, _work = placed
            self._finish(flow, task, lease_id, None, why)

    def _on_report(self, lease: Lease, report: Report) -> None:
        flow = self._runner_of.get(lease.lease_id)
        if flow is None:
            return
        book = self._books.setdefault((lease.flow, lease.task_id), LeaseBook())
        book.report(report)
        changed = report.times.keys()
        flow.report_lease(lease.task_id, report.lag, lambda task: book.fold(task, changed), report.times,
                          (report.held, report.refused, report.waiting))

    # -- figures ----------------------------------------------------------------------------------
    def codec_operations(self) -> tuple[int, int]:
        """Decompressions and compressions done by every lease so far (executors' work)."""
        d = c = 0
        for book in self._books.values():
            dd, cc = book.codec()
            d, c = d + dd, c + cc
        return d, c

    def leases_running(self) -> int:
        return sum(x.state is LeaseState.RUNNING for x in self.table.leases.values())

    # -- shutting down ----------------------------------------------------------------------------
    async def stop(self, timeout: float = 30.0) -> None:
        """Stop every lease (each commits and releases) and wait for their jobs, up to ``timeout``."""
        for lease in self._active():
            self.coordinator.stop(lease.lease_id, "the worker stops")
        deadline = time.monotonic() + timeout
        jobs = list(self._jobs.values())
        if jobs:
            _done, pending = await asyncio.wait(jobs, timeout=timeout)
            if pending:
                log.warning("%d leases did not end within %.0fs of the stop", len(pending), timeout)
        if self.hosts is not None:
            while self._placed and time.monotonic() < deadline:  # each says ENDED once committed
                await asyncio.sleep(0.05)
            if self._placed:
                log.warning("%d leases did not end within %.0fs of the stop", len(self._placed), timeout)
            await self.hosts.stop(max(1.0, deadline - time.monotonic()))
        await self.coordinator.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def abandon(self) -> None:
        """The Spark session is gone: jobs still awaited will not come back."""
        for job in self._jobs.values():
            job.cancel()
        if self.hosts is not None:
            self.hosts.abandon()
        with contextlib.suppress(Exception):
            self._pool.shutdown(wait=False, cancel_futures=True)
