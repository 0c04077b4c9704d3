"""The in-process runtime: every enabled flow's controller and tasks as asyncio tasks in one process.

The controller refreshes every ``refresh.topics.interval.seconds``; a changed assignment is handed
to the running tasks, which keep the positions of partitions they already mirror (no restart, no
rebalance). Stopping flushes offset syncs and commits every task's progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.engine.controller import Plan
from mm2py.engine.live_groups import AcknowledgedView
from mm2py.engine.losses import MirrorAlarmError
from mm2py.engine.scheduler import Scheduler
from mm2py.engine.task import TaskRunner
from mm2py.engine.task_contract import TASK_COUNTERS, TaskSpec, TaskState
from mm2py.retry import Backoff
from mm2py.runtime.active_topics import WatchedSink
from mm2py.runtime.flows import Claims, FlowRunnerBase
from mm2py.runtime.worker_base import WorkerBase

log = logging.getLogger(__name__)

#: a failed task restarts 0.5 s later, doubling with each failure in a row up to 60 s (``delay`` only)
TASK_RESTART_BACKOFF = Backoff(0.5, 60.0)

TaskBuilder = Callable[[TaskSpec], Awaitable[TaskRunner]]


class MirrorTaskBuilder:
    """Builds the mirror task of ``connectors/`` (the runtime composes connectors).

    Its module is imported on first use in a worker thread, started by :meth:`preload` while the
    controller's first refresh is under way: the import (numpy, codecs, the connectors; about a
    quarter of a second) then overlaps the controller's round trips instead of following them with
    the event loop blocked."""

    def __init__(self, commit_interval: float, acknowledged: AcknowledgedView | None = None) -> None:
        self.commit_interval = commit_interval
        #: told the offset syncs the flow's tasks send, as they send them (live group offset sync)
        self.acknowledged = acknowledged
        self._module: asyncio.Future[ModuleType] | None = None
        #: the flow's tasks' shared clients and fetch hub (``mm2py.connectors.mirror_task.FlowClients``)
        self._clients: Any = None

    def preload(self) -> None:
        if self._module is None:
            self._module = asyncio.ensure_future(
                asyncio.to_thread(importlib.import_module, "mm2py.connectors.mirror_task"))

    async def __call__(self, spec: TaskSpec) -> TaskRunner:
        self.preload()
        assert self._module is not None
        module = await asyncio.shield(self._module)
        if self._clients is None:
            if self.acknowledged is None:
                self._clients = module.FlowClients(spec.flow)
            else:
                self._clients = module.FlowClients(spec.flow, on_syncs=self.acknowledged.add_syncs)
        runner: TaskRunner = await module.build_task(spec, commit_interval=self.commit_interval,
                                                     clients=self._clients)
        return runner

    @property
    def shared(self) -> Any:
        """The flow's tasks' shared clients (``mm2py.connectors.mirror_task.FlowClients``), once built."""
        return self._clients

    async def close(self) -> None:
        """Close what the flow's tasks shared (once every task is closed)."""
        clients, self._clients = self._clients, None
        if clients is not None:
            await clients.close()


class FlowRunner(FlowRunnerBase[TaskRunner]):
    """Runs one ``source->target`` flow in this process."""

    def __init__(
        self, flow: FlowConfig, commit_interval: float = 1.0, builder: TaskBuilder | None = None,
        claims: Claims | None = None,
    ) -> None:
        """``claims``: which older flow of the pair mirrors a topic (the worker knows its flows)."""
        self._init_flow(flow, claims)
        self.commit_interval = commit_interval
        #: the tasks' acknowledged batches and offset syncs, for the live group offset sync
        self._acknowledged_view = AcknowledgedView()
        self.builder = builder if builder is not None else MirrorTaskBuilder(commit_interval,
                                                                             self._acknowledged_view)
        self._running: dict[int, asyncio.Task[None]] = {}

    async def refresh(self) -> Plan:
        """Discover topics now and hand the resulting assignment to the tasks."""
        async with self._refresh_lock:
            if not self.tasks and isinstance(self.builder, MirrorTaskBuilder):
                self.builder.preload()  # the tasks' code loads while the controller works
            plan = await self._plan()
            self.last_plan = plan
            # a partition moving between tasks: its old task lets go (stops producing it and
            # commits its position) before the new one starts, so two tasks never write it at once
            releases = [
                runner.release(plan.assignment.get(task_id, []))
                for task_id, runner in self.tasks.items()
                if set(runner.partitions) - set(plan.assignment.get(task_id, []))
            ]
            for released in await asyncio.gather(*releases):
                if not released:
                    log.warning("%s: a task did not release its partitions in time", self.name)
            for task_id, parts in plan.assignment.items():
                runner = self.tasks.get(task_id)
                if runner is None:
                    runner = self._watched(await self.builder(TaskSpec(self.flow, task_id, tuple(parts))))
                    self.tasks[task_id] = runner
                    self._running[task_id] = asyncio.create_task(self._run_task(task_id))
                else:
                    runner.assign(parts)
            for task_id, runner in self.tasks.items():
                if task_id not in plan.assignment:
                    runner.assign([])
            return plan

    def acknowledged_view(self) -> AcknowledgedView:
        return self._acknowledged_view

    def _watched(self, runner: TaskRunner) -> TaskRunner:
        """The task tells the flow which topics the target acknowledged (its active topics), and the
        live group offset sync what it acknowledged."""
        runner.sink = WatchedSink(runner.sink, self.acknowledged, self._acknowledged_view.delivered)
        return runner

    async def _run_task(self, task_id: int) -> None:
        """Run a task until the flow stops; a task that fails is started again from its committed
        progress after a back-off (0.5 s doubling to 60 s), as a fresh TaskRunner — the progress
        topic and the target's tail decide where it resumes, exactly as after a crash — unless an
        alarm under ``fail`` stopped it (``engine/losses.py``)."""
        failures = 0
        while not self._stop.is_set():
            runner = self.tasks[task_id]
            try:
                await runner.run(self._stop)
                return
            except MirrorAlarmError:  # an alarm under 'fail': FAILED until the flow is restarted
                log.error("%s task %d stopped: %s; it stays FAILED until the flow is restarted",
                          self.name, task_id, runner.trace)
                return
            except Exception:  # state and trace are kept on the runner (FAILED) meanwhile
                failures += 1
            delay = TASK_RESTART_BACKOFF.delay(failures - 1)
            log.warning("%s task %d failed (%s); restarting it in %.1fs from its committed progress",
                        self.name, task_id, runner.trace, delay)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            if not self._stop.is_set():
                await self._replace_task(task_id, runner)

    async def _replace_task(self, task_id: int, failed: TaskRunner) -> None:
        async with self._refresh_lock:  # the assignment does not change meanwhile
            with contextlib.suppress(Exception):
                await failed.close()
            try:
                fresh = self._watched(await self.builder(TaskSpec(self.flow, task_id, failed.assignment)))
            except Exception as exc:  # a cluster unreachable right now: try again after the back-off
                failed.trace = f"restarting failed: {type(exc).__name__}: {exc}"
                return
            for name in TASK_COUNTERS:  # the task's figures go on across restarts
                setattr(fresh.metrics, name, getattr(failed.metrics, name))
            fresh.metrics.restarts += 1
            self.tasks[task_id] = fresh

    async def stop(self) -> None:
        await self._stop_jobs()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
        for runner in self.tasks.values():
            with contextlib.suppress(Exception):
                await runner.close()
        if isinstance(self.builder, MirrorTaskBuilder):
            with contextlib.suppress(Exception):
                await self.builder.close()
        self.state = TaskState.STOPPED


class Worker(WorkerBase[FlowRunner]):
    """All enabled flows of one configuration, in this process, plus MM2's heartbeats.

    Flows can be added, changed, restarted and removed while the worker runs (the REST API does);
    those changes are MM2 keys layered over the configuration's own (:mod:`.steering`), written to
    ``state_file`` when one is given and read back from it at start.
    """

    def __init__(
        self, config: MirrorMakerConfig, *, commit_interval: float = 1.0, state_file: str | None = None
    ) -> None:
        super().__init__(config, state_file)
        self.commit_interval = commit_interval
        self.flows = self._initial_runners()

    async def start(self) -> None:
        self.startup.begin()
        await self.startup.start_flows(self._runnable())

    async def stop(self) -> None:
        beats = await self.startup.stop()
        running = [f for name, f in self.flows.items() if name not in self.halted]
        await asyncio.gather(*(f.stop() for f in running), *beats, return_exceptions=True)
        await self.state_file.written()  # active topics its tasks told while stopping

    def _new_runner(self, flow: FlowConfig, claims: Claims) -> FlowRunner:
        return FlowRunner(flow, self.commit_interval, claims=claims)

    async def run(self, stop: asyncio.Event, status_interval: float = 30.0) -> None:
        await self.start()
        try:
            jobs = Scheduler("worker", stop)
            jobs.every("status lines", status_interval, self._log_status, delay=status_interval)
            await jobs.run()
            await self._log_status()  # how far it got, as it stops
        finally:
            await self.stop()

    async def _log_status(self) -> None:
        for line in self.status_lines():
            log.info("%s", line)
