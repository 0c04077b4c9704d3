"""The part of a worker both runtimes share: steering flows at run time, heartbeats, status lines.

The in-process ``Worker`` and the ``SparkWorker`` differ in where tasks run; what a flow is, how it
is added, changed, restarted or removed while running (changes as MM2 keys layered over the
configuration, :mod:`.steering`), and MM2's heartbeats are the same for both.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from connectors.heartbeat import HeartbeatEmitter
from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.engine.scheduler import Scheduler
from mm2py.engine.task_api import TaskState
from mm2py.errors import ClusterUnreachableError
from mm2py.protocol.compression import CodecCounters
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.active_topics import ActiveTopics
from mm2py.runtime.flow_offsets import PartitionOffset, Reset, reset_offsets
from mm2py.runtime.flows import FlowRunnerBase
from mm2py.runtime.steering import (
    FILTER_KEYS,
    HALTED_STATES,
    FlowExistsError,
    FlowNotFoundError,
    FlowStateError,
    OverlayStore,
    cluster_keys,
    flow_keys,
    layered,
)

__all__ = ["WorkerBase"]

log = logging.getLogger(__name__)


R = TypeVar("R", bound=FlowRunnerBase[Any])


class WorkerBase(Generic[R]):
    """What both runtimes' workers share: steering flows while running (add, change, restart,
    remove; REST), MM2's heartbeats, and the periodic status lines.

    A runtime calls :meth:`_init_steering` and :meth:`_init_heartbeats` and implements
    :meth:`_new_runner`; changes are serialised by one lock and written to the state file before
    they take effect.
    """

    flows: dict[str, R]
    config: MirrorMakerConfig
    _started: bool

    def _init_steering(self, config: MirrorMakerConfig, state_file: str | None) -> MirrorMakerConfig:
        self.base_keys = dict(config.source_keys)
        self.store = OverlayStore(state_file)
        self.overlay = self.store.load()
        self.config = layered(self.base_keys, self.overlay) if self.overlay else config
        #: flows kept PAUSED or STOPPED (tasks shut down) until resumed; kept in the state file
        self.halted: dict[str, str] = self.store.sections.setdefault("states", {})
        #: the Kafka Connect facade's connectors (name -> Connect config); kept in the state file
        self.connectors: dict[str, dict[str, str]] = self.store.sections.setdefault("connectors", {})
        #: each flow's active topics (KIP-558); kept in the state file
        self.active_topics = ActiveTopics(self.store.sections.setdefault("topics", {}),
                                          lambda: self.store.save(self.overlay))
        self._steer_lock = asyncio.Lock()
        self._started = False
        return self.config

    def _runnable(self) -> list[R]:
        """The flows to start: every one not kept paused or stopped."""
        for name, state in self.halted.items():
            if name in self.flows:
                self.flows[name].state = TaskState(state)
        return [r for name, r in self.flows.items() if name not in self.halted]

    def _new_runner(self, flow: FlowConfig) -> R:
        raise NotImplementedError

    def _runner(self, flow: FlowConfig) -> R:
        """A new runner of ``flow`` that records the topics it writes to in :attr:`active_topics`."""
        runner = self._new_runner(flow)
        runner.on_acknowledged = self.active_topics.record
        return runner

    def reset_active_topics(self, name: str) -> None:
        """Forget flow ``name``'s active topics; each is recorded again when next written to."""
        self.active_topics.reset(name)
        if name in self.flows:
            self.flows[name].forget_acknowledged()

    # -- heartbeats: like MM2, every cluster pair emits them unless told not to, enabled flow or not
    def _init_heartbeats(self, config: MirrorMakerConfig) -> None:
        self.heartbeats: dict[str, HeartbeatEmitter] = {}
        for f in config.heartbeat_flows():
            self._add_heartbeat(f)
        self._beats_stop = asyncio.Event()  # also ends the start retries (_retry_start)
        self._beats: dict[str, asyncio.Task[None]] = {}
        self._retries: list[asyncio.Task[None]] = []

    def _add_heartbeat(self, flow: FlowConfig) -> None:
        if flow.emit_heartbeats_enabled and flow.emit_heartbeats_interval_seconds >= 0:
            self.heartbeats.setdefault(flow.name, HeartbeatEmitter(flow))

    def _start_heartbeats(self) -> None:
        for name, h in self.heartbeats.items():
            if name not in self._beats:
                self._beats[name] = asyncio.create_task(h.run(self._beats_stop))

    def _flow_added(self, flow: FlowConfig) -> None:
        self._add_heartbeat(flow)
        if self._started:
            self._start_heartbeats()

    def _sync_heartbeat(self, flow: FlowConfig) -> None:
        """Start or stop the pair's heartbeats after ``emit.heartbeats.*`` changed."""
        beat = self._beats.pop(flow.name, None)
        if beat is not None:
            beat.cancel()
        self.heartbeats.pop(flow.name, None)
        self._flow_added(flow)

    # -- status -----------------------------------------------------------------------------------
    def codec_operations(self) -> tuple[int, int]:
        """Decompressions and compressions done by this worker's tasks (this process's here)."""
        return CodecCounters.snapshot()

    def _status_suffix(self) -> str:
        return ""

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
                f"mirrored, {sum(t['lag'] for t in tasks):,} behind, tasks {'/'.join(states)}"
                f"{self._status_suffix()}"
            )
        return lines

    def flow(self, name: str) -> R:
        try:
            return self.flows[name]
        except KeyError:
            running = ", ".join(self.flows) or "none"
            raise FlowNotFoundError(f"no running flow {name!r} (running: {running})") from None

    async def add_flow(
        self, source: str, target: str, settings: Mapping[str, Any],
        clusters: Mapping[str, Mapping[str, str]] | None = None, *, drop: Callable[[str], bool] | None = None,
        halted: str | None = None,
    ) -> R:
        """Start ``source->target`` with ``settings`` (MM2 names); new clusters may come with it.
        ``drop``: earlier HTTP-given settings of the pair it accepts are dropped first. ``halted``
        (``PAUSED`` or ``STOPPED``): created so, no task started until resumed (KIP-980)."""
        name = f"{source}->{target}"
        if halted is not None and halted not in HALTED_STATES:
            raise ValueError(f"a flow is halted as PAUSED or STOPPED, not {halted!r}")
        async with self._steer_lock:
            if name in self.flows:
                raise FlowExistsError(f"flow {name!r} is already running")
            keys = cluster_keys(self.config, clusters or {})
            layered(self.base_keys, {**self.overlay, **keys}).flow(source, target)  # unknown cluster?
            keys.update(flow_keys(name, {**settings, "enabled": True}))
            overlay = {**_dropped(self.overlay, name, drop), **keys}
            config = layered(self.base_keys, overlay)
            runner = self._runner(config.flows[name])
            if halted is not None:
                self.halted[name] = halted
                runner.state = TaskState(halted)
            elif self._started:
                try:
                    await runner.start()
                except BaseException:
                    await runner.stop()
                    raise
            self._commit_overlay(overlay, config)
            self.flows[name] = runner
            self._flow_added(runner.flow)
            return runner

    async def update_flow(
        self, name: str, settings: Mapping[str, Any], *, drop: Callable[[str], bool] | None = None
    ) -> R:
        """Change settings of a flow: topic lists and heartbeat settings in place, anything else by
        a restart (a paused or stopped flow stays so). ``drop``: settings given over HTTP before
        whose name it accepts are dropped first (Kafka Connect's ``PUT .../config`` replaces)."""
        async with self._steer_lock:
            runner = self.flow(name)
            overlay = {**_dropped(self.overlay, name, drop), **flow_keys(name, settings)}
            config = layered(self.base_keys, overlay)
            flow = config.flows[name]
            changed = {k for k in set(flow.model_dump(by_alias=True)) if k != "enabled"
                       and getattr(flow, _field(k)) != getattr(runner.flow, _field(k))}
            self._commit_overlay(overlay, config)
            if changed & HEARTBEAT_KEYS:
                self._sync_heartbeat(flow)
            if not changed - FILTER_KEYS - HEARTBEAT_KEYS:
                runner.flow = flow
                runner.set_topic_filter(flow.topic_filter())
                if name not in self.halted and changed & FILTER_KEYS:
                    await runner.refresh()
                return runner
            return await self._replace(runner, flow)

    async def set_pair_settings(
        self, source: str, target: str, settings: Mapping[str, Any],
        clusters: Mapping[str, Mapping[str, str]] | None = None, *, drop: Callable[[str], bool] | None = None,
    ) -> FlowConfig:
        """Settings of the pair ``source->target`` that need no running flow (heartbeats): a flow
        of that pair, if one runs, takes them as :meth:`update_flow` does."""
        name = f"{source}->{target}"
        if name in self.flows:
            return (await self.update_flow(name, settings, drop=drop)).flow
        async with self._steer_lock:
            keys = cluster_keys(self.config, clusters or {})
            layered(self.base_keys, {**self.overlay, **keys}).flow(source, target)  # unknown cluster?
            overlay = {**_dropped(self.overlay, name, drop), **keys, **flow_keys(name, settings)}
            config = layered(self.base_keys, overlay)
            self._commit_overlay(overlay, config)
            self._sync_heartbeat(config.flows[name])
            return config.flows[name]

    async def restart_flow(self, name: str) -> R:
        """Stop the flow (its tasks commit their progress) and start it again, e.g. after a failure.
        A paused or stopped flow stays so (resume it instead)."""
        async with self._steer_lock:
            runner = self.flow(name)
            return await self._replace(runner, runner.flow)

    async def halt_flow(self, name: str, state: str = "STOPPED") -> R:
        """Shut the flow's tasks down (they commit their progress) and keep the flow, ``PAUSED`` or
        ``STOPPED`` (KIP-875: only a stopped flow's offsets may be changed), until resumed."""
        if state not in HALTED_STATES:
            raise ValueError(f"a flow is halted as PAUSED or STOPPED, not {state!r}")
        async with self._steer_lock:
            runner = self.flow(name)
            was_halted = name in self.halted
            self.halted[name] = state  # first: a runtime's tasks are fenced from here on
            if not was_halted:
                await self._halt_tasks(runner)
            runner.state = TaskState(state)
            self._commit_overlay(self.overlay, self.config)
            return runner

    async def resume_flow(self, name: str) -> R:
        """Start a paused or stopped flow again, from its committed (or reset) positions."""
        async with self._steer_lock:
            runner = self.flow(name)
            if name not in self.halted:
                return runner
            del self.halted[name]
            self._commit_overlay(self.overlay, self.config)
            return await self._replace(runner, runner.flow)

    async def _halt_tasks(self, runner: R) -> None:
        """End the tasks of a flow being paused or stopped (already in :attr:`halted`); they
        commit their progress, and none writes once this returns."""
        await runner.stop()

    def _check_no_writers(self, name: str) -> None:
        """Raise ``FlowStateError`` while a task of the stopped flow ``name`` may still write (a
        runtime whose tasks can outlive :meth:`_halt_tasks`)."""

    async def reset_offsets(
        self, source: str, target: str, changes: Mapping[TopicPartition, Reset | None] | None,
    ) -> list[PartitionOffset]:
        """Move the flow's committed source positions (a partition mapped to ``None`` is forgotten,
        ``changes=None`` forgets them all); only while the
        flow is stopped or not running here, so that no task commits over the new positions."""
        name = f"{source}->{target}"
        async with self._steer_lock:
            runner = self.flows.get(name)
            if runner is not None and self.halted.get(name) != "STOPPED":
                raise FlowStateError(
                    f"flow {name!r} is {runner.state}: its offsets can be changed only while it is "
                    "STOPPED (stop it first; it resumes from the new positions)")
            self._check_no_writers(name)
            flow = runner.flow if runner is not None else self.config.flow(source, target)
            return await reset_offsets(flow, changes)

    async def remove_flow(self, name: str) -> None:
        """Stop the flow and disable it; its progress stays on the target for a later restart."""
        async with self._steer_lock:
            runner = self.flow(name)
            keys = {f"{name}.enabled": "false"}
            was_halted = self.halted.pop(name, None) is not None
            self._commit_overlay({**self.overlay, **keys}, layered(self.base_keys, {**self.overlay, **keys}))
            del self.flows[name]
            runner.on_acknowledged = None  # what its tasks settle while stopping is not recorded
            self.active_topics.reset(name)  # as Connect forgets a deleted connector's
            if not was_halted:
                await runner.stop()

    async def _replace(self, runner: R, flow: FlowConfig) -> R:
        halted = self.halted.get(flow.name)
        if runner.state not in HALTED_STATES:
            await runner.stop()
        fresh = self._runner(flow)
        self.flows[flow.name] = fresh
        if halted is not None:
            fresh.state = TaskState(halted)
        elif self._started:
            await fresh.start()
        return fresh

    # -- start-up ---------------------------------------------------------------------------------
    async def _start_flows(self, runners: Iterable[R] | None = None) -> None:
        """Start every flow. A flow whose cluster cannot be reached is left FAILED (its status says
        why) and started again in the background (a one-off job of the flow's scheduler: by
        default 5 s later, then 10, 20, 40, 60, 60 ... s later; ``mm2py.start.retry.backoff.ms``
        and ``.max.ms``) while the worker and its other flows run; any other start failure (a
        configuration refused by a broker, say) stops the worker."""
        runners = list(self.flows.values() if runners is None else runners)
        outcomes = await asyncio.gather(*(r.start() for r in runners), return_exceptions=True)
        for runner, outcome in zip(runners, outcomes, strict=True):
            if isinstance(outcome, ClusterUnreachableError):
                log.error("%s: not started: %s; trying again in the background", runner.flow.name, outcome)
                self._retries.append(asyncio.create_task(self._retry_start(runner)))
            elif isinstance(outcome, BaseException):
                raise outcome

    async def _retry_start(self, runner: R) -> None:
        """The flow's start as a one-off job of its own scheduler, retried with back-off while its
        cluster stays unreachable; any other failure gives up (the flow stays FAILED)."""
        name = runner.flow.name

        async def start() -> None:
            if self.flows.get(name) is not runner:
                return  # the flow was replaced or removed meanwhile
            try:
                await runner.start()
            except ClusterUnreachableError:
                raise  # the scheduler logs it and tries again later
            except Exception as exc:
                log.error("%s: start failed: %s", name, exc)
                return
            log.info("%s: started", name)

        jobs = Scheduler(name, self._beats_stop)
        first = runner.flow.start_retry_backoff_ms / 1000
        longest = max(2 * first, runner.flow.start_retry_backoff_max_ms / 1000)
        jobs.once("delayed start", start, delay=first, retry=2 * first, backoff=2.0, max_retry=longest)
        await jobs.run()

    async def _stop_retries(self) -> None:
        for task in self._retries:
            task.cancel()
        await asyncio.gather(*self._retries, return_exceptions=True)
        self._retries.clear()

    def _commit_overlay(self, overlay: dict[str, Any], config: MirrorMakerConfig) -> None:
        self.store.save(overlay)
        self.overlay, self.config = overlay, config


#: settings only the worker's heartbeat emitter reads: no flow restart for them
HEARTBEAT_KEYS = frozenset({"emit.heartbeats.enabled", "emit.heartbeats.interval.seconds",
                            "heartbeats.topic.replication.factor"})


def _dropped(overlay: Mapping[str, Any], name: str, drop: Callable[[str], bool] | None) -> dict[str, Any]:
    """``overlay`` without the settings of flow ``name`` that ``drop`` accepts (never ``enabled``)."""
    if drop is None:
        return dict(overlay)
    prefix = f"{name}."
    return {k: v for k, v in overlay.items()
            if not k.startswith(prefix) or k == f"{name}.enabled" or not drop(k[len(prefix):])}


def _field(alias: str) -> str:
    """The FlowConfig attribute of an MM2 setting name."""
    return _FIELDS.get(alias, alias)


_FIELDS = {f.alias or n: n for n, f in FlowConfig.model_fields.items()}
