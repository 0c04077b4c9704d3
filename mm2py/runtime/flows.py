"""What both runtimes' flow runners share: the flow's controller, its start, its status.

A flow runner runs one ``source->target`` flow: its controller (topic discovery, target topics, the
assignment of partitions to tasks), MM2's checkpoint connector, and tasks — as asyncio tasks in this
process (:class:`~mm2py.runtime.inprocess.FlowRunner`) or as leases (or rounds) on Spark executors
(:class:`~mm2py.runtime.spark.driver.flow_runner.SparkFlowRunner`). :class:`FlowRunnerBase` holds
what does not depend on where the tasks run: the client-settings check at construction, the start
(internal topics, first refresh) and its failure path, the checkpoint connector, the topic ACL sync,
the refresh rule, the topic filter and the ``status()`` shape that the REST API, the status lines
and the metrics read.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from mm2py.config.filters import TopicFilter
from mm2py.config.models import FlowConfig
from mm2py.connectors.acl_sync import TopicAclSync
from mm2py.connectors.checkpoint import CheckpointConnector
from mm2py.connectors.sync_history import SyncHistoryPruner
from mm2py.engine.controller import Controller, Plan
from mm2py.engine.live_groups import AcknowledgedView
from mm2py.engine.losses import alarm_counts, recent_alarms
from mm2py.engine.scheduler import Scheduler
from mm2py.engine.task_contract import TaskMetrics, TaskState
from mm2py.protocol.connect_offsets import progress_topic
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin

#: which older flow of a pair mirrors a topic (None: none does)
Claims = Callable[[str], str | None]

if TYPE_CHECKING:
    from mm2py.connectors.client_settings import RawClientSettings

__all__ = ["FIRST_PRUNE_DELAY", "FlowRunnerBase", "TaskView", "controller_for", "ensure_internal_topics",
           "internal_topic_jobs"]

#: seconds from a flow's start to its first pruning of the sync history: soon (each start, a restart
#: too, would otherwise wait a whole prune interval, 10 minutes by default), yet after the start's
#: own work (internal topics, first refresh, the tasks' first fetches)
FIRST_PRUNE_DELAY = 30.0


def controller_for(flow: FlowConfig, admins: tuple[ClusterAdmin, ClusterAdmin] | None = None,
                   claimed_by: Callable[[str], str | None] | None = None) -> Controller:
    """The flow's controller, with admin clients for both clusters (new ones unless given);
    ``claimed_by``: which older flow of the pair mirrors a topic (``Controller``)."""
    timeout = flow.admin_timeout_ms / 1000
    source, target = admins or (ClusterAdmin.for_cluster(flow, "source", timeout=timeout),
                                ClusterAdmin.for_cluster(flow, "target", timeout=timeout))
    return Controller(
        flow.source, flow.target, source, target,
        topic_filter=flow.topic_filter(),
        policy=flow.replication_policy(),
        tasks_max=flow.tasks_max,
        sync_topic_configs=flow.sync_topic_configs_enabled,
        config_filter=flow.config_property_filter(),
        replication_factor=flow.replication_factor,
        replicate_heartbeats=flow.heartbeats_replication_enabled,
        claimed_by=claimed_by,
    )


def internal_topic_jobs(flow: FlowConfig, controller: Controller) -> list[Callable[[], None]]:
    """Creating (if missing) the progress topic on the target, the offset-syncs topic and the sync
    history topic where the flow keeps them: independent admin calls, each blocking (run them in
    threads, together)."""
    partitions, rf = flow.progress_topic_layout()
    jobs: list[Callable[[], None]] = [functools.partial(
        controller.target_admin.ensure_compacted_topic, progress_topic(flow.source), rf, partitions,
    )]
    if flow.emit_offset_syncs_enabled:
        on_source = flow.offset_syncs_topic_location == "source"
        admin = controller.source_admin if on_source else controller.target_admin
        jobs.append(functools.partial(
            admin.ensure_compacted_topic, flow.offset_syncs_topic(),
            flow.offset_syncs_topic_replication_factor,
        ))
        if flow.writes_sync_history:
            jobs.append(functools.partial(
                admin.ensure_compacted_topic, flow.offset_sync_history_topic(),
                flow.offset_syncs_topic_replication_factor,
            ))
    return jobs


def ensure_internal_topics(flow: FlowConfig, controller: Controller) -> None:
    """Progress topic on the target; offset-syncs topic where the flow keeps it."""
    for job in internal_topic_jobs(flow, controller):
        job()


class TaskView(Protocol):
    """What a runner shows of each of its tasks (the in-process ``TaskRunner``, a ``SparkTask``)."""

    @property
    def state(self) -> TaskState: ...

    @property
    def trace(self) -> str | None: ...

    @property
    def partitions(self) -> Sequence[TopicPartition]: ...

    @property
    def metrics(self) -> TaskMetrics: ...


T = TypeVar("T", bound=TaskView)


class FlowRunnerBase(Generic[T]):
    """One ``source->target`` flow: controller, checkpoint connector and the tasks' state.

    A runtime's runner calls :meth:`_init_flow` first in its constructor, implements
    :meth:`refresh` (discover topics and hand the assignment to its tasks) and :meth:`stop`, and
    may extend :meth:`_connect` (what else the start needs once the first plan is known).
    """

    flow: FlowConfig
    controller: Controller
    tasks: dict[int, T]
    last_plan: Plan | None
    state: TaskState
    trace: str | None
    checkpoints: CheckpointConnector | None
    acl_sync: TopicAclSync | None

    def _init_flow(self, flow: FlowConfig, claims: Claims | None = None) -> RawClientSettings:
        """``claims``: which older flow of the pair mirrors a topic (its controller leaves those)."""
        from mm2py.connectors.client_settings import raw_client_settings

        # a bad client override is a configuration error now, not a task failure later
        settings = raw_client_settings(flow, fetch_max_bytes=flow.fetch_max_bytes)
        self.flow = flow
        self.controller = controller_for(flow, claimed_by=claims)
        self.tasks = {}
        self.last_plan = None
        self.state = TaskState.UNASSIGNED
        self.trace = None
        self.checkpoints = None
        self.acl_sync = None
        self._stop = asyncio.Event()
        self._checkpointing: asyncio.Task[None] | None = None
        self._refresher: asyncio.Task[None] | None = None
        #: the sync history's pruner, which also raises target.retention (made at its first turn)
        self.pruner: SyncHistoryPruner | None = None
        self._refresh_lock = asyncio.Lock()
        #: the internal topics to create with the next plan (set by start, taken by _plan)
        self._internal_topics: list[Callable[[], None]] = []
        self._lock = threading.Lock()  # status() may be read from other threads
        #: told the source topics the target acknowledged batches of, each once per runner (the
        #: worker keeps the flow's active topics with it: KIP-558, ``runtime.active_topics``)
        self.on_acknowledged: Callable[[FlowConfig, set[str]], None] | None = None
        self._acknowledged: set[str] = set()
        return settings

    def acknowledged(self, topics: set[str]) -> None:
        """The target acknowledged batches of these source topics."""
        if topics <= self._acknowledged:
            return
        new = topics - self._acknowledged
        self._acknowledged |= new
        if self.on_acknowledged is not None:
            self.on_acknowledged(self.flow, new)

    def forget_acknowledged(self) -> None:
        """Tell every topic again when next acknowledged (the flow's active topics were reset)."""
        self._acknowledged.clear()

    def acknowledged_view(self) -> AcknowledgedView | None:
        """What the flow's tasks had acknowledged, as they acknowledge it, when they run in this
        process (the live group offset sync translates with it); None: they run elsewhere."""
        return None

    @property
    def name(self) -> str:
        return self.flow.name

    async def refresh(self) -> Plan:
        """Discover topics now (:meth:`_plan`) and hand the assignment to the tasks."""
        raise NotImplementedError

    async def _plan(self) -> Plan:
        """The controller's refresh, in a thread. The first one, at start, runs beside the creation
        of the internal topics (one admin round trip each, on two clusters), and returns once both
        are done: no task starts before the topics it writes its progress and offset syncs to."""
        plan = asyncio.to_thread(self.controller.refresh)
        internal, self._internal_topics = self._internal_topics, []
        if not internal:
            return await plan
        done, *_ = await asyncio.gather(plan, *(asyncio.to_thread(job) for job in internal))
        assert isinstance(done, Plan)
        return done

    async def stop(self) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        """Internal topics, the first refresh, then the flow runs; a failure marks it FAILED."""
        try:
            self._internal_topics = internal_topic_jobs(self.flow, self.controller)
            await self.refresh()  # its _plan creates them, beside the controller's first refresh
            await self._connect()
        except Exception as exc:
            self.state, self.trace = TaskState.FAILED, f"{type(exc).__name__}: {exc}"
            raise
        self.state, self.trace = TaskState.RUNNING, None  # a failed earlier start is over
        self._start_refresher()
        self._start_checkpoints()
        self.acl_sync = TopicAclSync.started(self.flow, self.controller, self._stop)

    async def _connect(self) -> None:
        """What the runtime needs besides the first plan before the flow runs (nothing here)."""

    def _start_refresher(self) -> None:
        """Run the flow's periodic jobs (:meth:`_flow_jobs`) until the flow stops."""
        jobs = self._flow_jobs()
        if jobs.jobs:
            self._refresher = asyncio.create_task(jobs.run())

    def _flow_jobs(self, clock: Callable[[], float] = time.monotonic) -> Scheduler:
        """The controller's topic refresh, every ``refresh.topics.interval.seconds`` from now, and
        the pruning of the sync history, every ``mm2py.offset.sync.history.prune.interval.seconds``:
        first :data:`FIRST_PRUNE_DELAY` seconds after the start (at most one interval), so that a
        restarted worker does not leave the history unpruned for a whole interval."""
        jobs = Scheduler(self.name, self._stop, clock=clock)
        interval = self.refresh_interval
        if interval is not None:
            jobs.every("refresh topics", interval, self.refresh, delay=interval)
        if self.flow.writes_sync_history:
            every = float(self.flow.offset_sync_history_prune_interval_seconds)
            jobs.every("prune sync history", every, self._prune_history, delay=min(every, FIRST_PRUNE_DELAY))
        return jobs

    async def _prune_history(self) -> None:
        if self.pruner is None:
            self.pruner = await asyncio.to_thread(SyncHistoryPruner, self.flow)
        await asyncio.to_thread(self.pruner.prune)

    def _start_checkpoints(self) -> None:
        """MM2's checkpoint connector for this flow, when it emits checkpoints or syncs group
        offsets; it follows the offset syncs and progress the tasks write."""
        self.checkpoints = CheckpointConnector.for_flow(self.flow, self.controller, self.acknowledged_view())
        if self.checkpoints is not None:
            self._checkpointing = asyncio.create_task(self.checkpoints.run(self._stop))

    async def _stop_jobs(self) -> None:
        """Stop the refresh (a refresh under way is abandoned), the topic ACL sync and the
        checkpoint connector."""
        self._stop.set()
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(BaseException):
                await self._refresher
        if self.pruner is not None:
            pruner, self.pruner = self.pruner, None
            await asyncio.to_thread(pruner.close)
        if self.acl_sync is not None:
            await self.acl_sync.stop()
        if self._checkpointing is not None:
            await asyncio.gather(self._checkpointing, return_exceptions=True)

    @property
    def refresh_interval(self) -> float | None:
        """Seconds between topic refreshes; None when the flow refreshes only at start (MM2: a
        negative ``refresh.topics.interval.seconds``, or ``refresh.topics.enabled=false``)."""
        interval = self.flow.refresh_topics_interval_seconds
        if interval < 0 or not self.flow.refresh_topics_enabled:
            return None
        return float(max(1, interval))

    def set_topic_filter(self, topic_filter: TopicFilter) -> None:
        self.controller.set_topic_filter(topic_filter)

    def status(self) -> dict[str, Any]:
        """The flow's state, its topics, each task's state and counters, the checkpoint connector's
        and the topic ACL sync's."""
        with self._lock:
            tasks = [_task_status(task_id, t) for task_id, t in sorted(self.tasks.items())]
            return {
                "name": self.name, "source": self.flow.source, "target": self.flow.target,
                "state": self.state, "trace": self.trace,
                "topics": dict(self.last_plan.topics) if self.last_plan else {},
                # remote topics with fewer partitions than their source that the target refused to grow
                "short_topics": {t: {"partitions": have, "source_partitions": want, "reason": why}
                                 for t, (have, want, why) in self.last_plan.short.items()}
                if self.last_plan else {},
                "tasks": tasks,
                "checkpoints": self.checkpoints.status() if self.checkpoints else None,
                "acl_sync": self.acl_sync.status() if self.acl_sync else None,
                # target.retention: records the target deleted that the source still holds, each
                # with the remote topic's setting that did it (connectors/sync_history.py)
                "target_retention": self.pruner.retention_status() if self.pruner else [],
            }

    def status_line(self) -> str:
        """One line for the log: what runs and how far it got."""
        st = self.status()
        tasks = st["tasks"]
        states = sorted({t["state"] for t in tasks}) or ["no tasks"]
        return (f"{self.name}: {len(st['topics'])} topics, {sum(len(t['partitions']) for t in tasks)} "
                f"partitions, {sum(t['records'] for t in tasks):,} records / "
                f"{sum(t['bytes'] for t in tasks):,} bytes mirrored, {sum(t['lag'] for t in tasks):,} "
                f"behind, tasks {'/'.join(states)}")


def _task_status(task_id: int, task: TaskView) -> dict[str, Any]:
    m = task.metrics
    return {
        "id": task_id, "state": task.state, "trace": task.trace,
        "partitions": [str(tp) for tp in task.partitions],
        "batches": m.batches, "records": m.records, "bytes": m.bytes,
        "rebuilt_batches": m.rebuilt_batches, "split_batches": m.split_batches, "syncs": m.syncs,
        "lag": sum(m.lag.values()), "restarts": m.restarts,
        # the alarms (engine/losses.py): counts, and the newest in words where the task keeps them
        "verified_batches": m.audit_verified_batches,
        "alarms": alarm_counts(m),
        "recent_alarms": recent_alarms(task),
        # partitions held at a record the target refuses (target.too.large under fail)
        "held_partitions": list(getattr(task, "held_partitions", ())),
        # partitions the target refuses, each resting alone: cause, what to change, next retry
        "refused_partitions": list(getattr(task, "refused_partitions", ())),
        # what the task waits for the target on, with no alarm: partitions with too few in-sync
        # replicas, brokers throttling it under a quota (engine/refusals.py)
        "waiting_for_target": list(getattr(task, "waiting_for_target", ())),
    }
