"""The in-process runtime: every enabled flow's controller and tasks as asyncio tasks in one process.

The controller refreshes every ``refresh.topics.interval.seconds``; a changed assignment is handed
to the running tasks, which keep the positions of partitions they already mirror (no restart, no
rebalance). Stopping flushes offset syncs and commits every task's progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from connectors.acl_sync import TopicAclSync
from connectors.checkpoint import CheckpointConnector
from mm2py.config.filters import TopicFilter
from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.engine.controller import Controller, Plan
from mm2py.engine.task import TaskRunner
from mm2py.engine.task_api import TASK_COUNTERS, TaskSpec
from mm2py.protocol.connect_offsets import progress_topic
from mm2py.runtime.worker_base import WorkerBase
from mm2py.stores.admin import ClusterAdmin

log = logging.getLogger(__name__)

TaskBuilder = Callable[[TaskSpec], Awaitable[TaskRunner]]


def _default_builder(commit_interval: float) -> TaskBuilder:
    async def build(spec: TaskSpec) -> TaskRunner:
        from connectors.mirror_task import build_task  # runtime composes connectors

        return await build_task(spec, commit_interval=commit_interval)

    return build


def controller_for(flow: FlowConfig) -> Controller:
    timeout = flow.admin_timeout_ms / 1000
    return Controller(
        flow.source, flow.target,
        ClusterAdmin.for_cluster(flow, "source", timeout=timeout),
        ClusterAdmin.for_cluster(flow, "target", timeout=timeout),
        topic_filter=flow.topic_filter(),
        policy=flow.replication_policy(),
        tasks_max=flow.tasks_max,
        sync_topic_configs=flow.sync_topic_configs_enabled,
        config_filter=flow.config_property_filter(),
        replication_factor=flow.replication_factor,
        replicate_heartbeats=flow.heartbeats_replication_enabled,
    )


def ensure_internal_topics(flow: FlowConfig, controller: Controller) -> None:
    """Progress topic on the target; offset-syncs topic where the flow keeps it."""
    controller.target_admin.ensure_compacted_topic(
        progress_topic(flow.source), flow.checkpoints_topic_replication_factor
    )
    if flow.emit_offset_syncs_enabled:
        on_source = flow.offset_syncs_topic_location == "source"
        admin = controller.source_admin if on_source else controller.target_admin
        admin.ensure_compacted_topic(flow.offset_syncs_topic(), flow.offset_syncs_topic_replication_factor)


@dataclass
class FlowRunner:
    """Runs one ``source->target`` flow in this process."""

    flow: FlowConfig
    commit_interval: float = 1.0
    builder: TaskBuilder | None = None
    controller: Controller = field(init=False)
    tasks: dict[int, TaskRunner] = field(default_factory=dict)
    last_plan: Plan | None = None
    state: str = "UNASSIGNED"
    trace: str | None = None
    checkpoints: CheckpointConnector | None = field(default=None, init=False)
    acl_sync: TopicAclSync | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        from connectors.client_settings import raw_client_settings

        # a bad client override is a configuration error now, not a task failure later
        raw_client_settings(self.flow, fetch_max_bytes=self.flow.fetch_max_bytes)
        self.controller = controller_for(self.flow)
        self._stop = asyncio.Event()
        self._running: dict[int, asyncio.Task[None]] = {}
        self._refresher: asyncio.Task[None] | None = None
        self._refresh_lock = asyncio.Lock()
        self._checkpointing: asyncio.Task[None] | None = None
        if self.builder is None:
            self.builder = _default_builder(self.commit_interval)

    @property
    def name(self) -> str:
        return self.flow.name

    async def start(self) -> None:
        try:
            await asyncio.to_thread(ensure_internal_topics, self.flow, self.controller)
            await self.refresh()
        except Exception as exc:
            self.state, self.trace = "FAILED", f"{type(exc).__name__}: {exc}"
            raise
        self.state = "RUNNING"
        self._refresher = asyncio.create_task(self._refresh_loop())
        self._start_checkpoints()
        self.acl_sync = TopicAclSync.started(self.flow, self.controller, self._stop)

    def _start_checkpoints(self) -> None:
        """MM2's checkpoint connector for this flow, when it emits checkpoints or syncs group offsets."""
        self.checkpoints = CheckpointConnector.for_flow(self.flow, self.controller)
        if self.checkpoints is not None:
            self._checkpointing = asyncio.create_task(self.checkpoints.run(self._stop))

    async def refresh(self) -> Plan:
        """Discover topics now and hand the resulting assignment to the tasks."""
        async with self._refresh_lock:
            plan = await asyncio.to_thread(self.controller.refresh)
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
                    assert self.builder is not None
                    runner = await self.builder(TaskSpec(self.flow, task_id, tuple(parts)))
                    self.tasks[task_id] = runner
                    self._running[task_id] = asyncio.create_task(self._run_task(task_id))
                else:
                    runner.assign(parts)
            for task_id, runner in self.tasks.items():
                if task_id not in plan.assignment:
                    runner.assign([])
            return plan

    def set_topic_filter(self, topic_filter: TopicFilter) -> None:
        self.controller.set_topic_filter(topic_filter)

    async def _run_task(self, task_id: int) -> None:
        """Run a task until the flow stops; a task that fails is started again from its committed
        progress after a back-off (0.5 s doubling to 60 s), as a fresh TaskRunner — the progress
        topic and the target's tail decide where it resumes, exactly as after a crash."""
        failures = 0
        while not self._stop.is_set():
            runner = self.tasks[task_id]
            try:
                await runner.run(self._stop)
                return
            except Exception:  # state and trace are kept on the runner (FAILED) meanwhile
                failures += 1
            delay = min(60.0, 0.5 * 2 ** (failures - 1))
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
            assert self.builder is not None
            try:
                fresh = await self.builder(TaskSpec(self.flow, task_id, failed.assignment))
            except Exception as exc:  # a cluster unreachable right now: try again after the back-off
                failed.trace = f"restarting failed: {type(exc).__name__}: {exc}"
                return
            for name in TASK_COUNTERS:  # the task's figures go on across restarts
                setattr(fresh.metrics, name, getattr(failed.metrics, name))
            fresh.metrics.restarts += 1
            self.tasks[task_id] = fresh

    async def _refresh_loop(self) -> None:
        interval = self.flow.refresh_topics_interval_seconds
        if interval < 0 or not self.flow.refresh_topics_enabled:
            return  # MM2: a negative interval (or refresh.topics.enabled=false) disables the refresh
        interval = max(1, interval)
        while not self._stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval)
            if self._stop.is_set():
                continue
            try:
                await self.refresh()
            except Exception:
                log.exception("%s: topic refresh failed; retrying next interval", self.name)

    async def stop(self) -> None:
        self._stop.set()
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(BaseException):
                await self._refresher
        if self.acl_sync is not None:
            await self.acl_sync.stop()
        if self._running or self._checkpointing:
            checkpointing = [self._checkpointing] if self._checkpointing else []
            await asyncio.gather(*self._running.values(), *checkpointing, return_exceptions=True)
        for runner in self.tasks.values():
            with contextlib.suppress(Exception):
                await runner.close()
        self.state = "STOPPED"

    def status(self) -> dict[str, Any]:
        tasks = []
        for task_id, r in sorted(self.tasks.items()):
            m = r.metrics
            tasks.append({
                "id": task_id, "state": r.state, "trace": r.trace,
                "partitions": [str(tp) for tp in r.partitions],
                "batches": m.batches, "records": m.records, "bytes": m.bytes,
                "rebuilt_batches": m.rebuilt_batches, "syncs": m.syncs,
                "lag": sum(m.lag.values()), "restarts": m.restarts,
            })
        return {
            "name": self.name, "state": self.state, "trace": self.trace,
            "topics": dict(self.last_plan.topics) if self.last_plan else {},
            "tasks": tasks,
            "checkpoints": self.checkpoints.status() if self.checkpoints else None,
            "acl_sync": self.acl_sync.status() if self.acl_sync else None,
        }


class Worker(WorkerBase[FlowRunner]):
    """All enabled flows of one configuration, in this process, plus MM2's heartbeats.

    Flows can be added, changed, restarted and removed while the worker runs (the REST API does);
    those changes are MM2 keys layered over the configuration's own (:mod:`.steering`), written to
    ``state_file`` when one is given and read back from it at start.
    """

    def __init__(
        self, config: MirrorMakerConfig, *, commit_interval: float = 1.0, state_file: str | None = None
    ) -> None:
        self._init_steering(config, state_file)
        self.commit_interval = commit_interval
        self.flows = {f.name: FlowRunner(f, commit_interval) for f in self.config.enabled_flows()}
        self._init_heartbeats(self.config)

    async def start(self) -> None:
        self._started = True
        self._start_heartbeats()
        await self._start_flows(self._runnable())

    async def stop(self) -> None:
        self._beats_stop.set()
        await self._stop_retries()
        running = [f for name, f in self.flows.items() if name not in self.halted]
        await asyncio.gather(*(f.stop() for f in running), *self._beats.values(), return_exceptions=True)

    def _new_runner(self, flow: FlowConfig) -> FlowRunner:
        return FlowRunner(flow, self.commit_interval)

    async def run(self, stop: asyncio.Event, status_interval: float = 30.0) -> None:
        await self.start()
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), status_interval)
                for line in self.status_lines():
                    log.info("%s", line)
        finally:
            await self.stop()
