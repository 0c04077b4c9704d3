"""The part of a worker both runtimes share: steering flows at run time, heartbeats, status lines.

The in-process ``Worker`` and the ``SparkWorker`` differ in where tasks run; what a flow is, how it
is added, changed, restarted or removed while running (changes as MM2 keys layered over the
configuration, :mod:`.steering`), and MM2's heartbeats are the same for both.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from mm2py.config.models import FlowConfig, MirrorMakerConfig, check_flow_name, pair_name
from mm2py.config.patch import FlowPatch, changed_settings
from mm2py.engine.task_contract import HALTED_STATES, TaskState
from mm2py.operations.flow_offsets import PartitionOffset, Reset, reset_offsets
from mm2py.protocol.compression import CodecCounters
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.active_topics import ActiveTopics
from mm2py.runtime.flows import Claims, FlowRunnerBase
from mm2py.runtime.named_flows import NamedFlows, check_overlap, pair_config
from mm2py.runtime.state_file import StateFile
from mm2py.runtime.steering import (
    FILTER_KEYS,
    FlowConflictError,
    FlowExistsError,
    FlowNotFoundError,
    FlowStateError,
    cluster_keys,
    flow_keys,
    layered,
)
from mm2py.runtime.worker_startup import HEARTBEAT_KEYS, WorkerStartup

__all__ = ["HEARTBEAT_KEYS", "WorkerBase"]

log = logging.getLogger(__name__)


R = TypeVar("R", bound=FlowRunnerBase[Any])
T = TypeVar("T")


class WorkerBase(Generic[R]):
    """What both runtimes' workers share: steering flows while running (add, change, restart,
    remove; REST), MM2's heartbeats and the flows' first start (:attr:`startup`), and the periodic
    status lines.

    A runtime calls this constructor, then builds its flows (:meth:`_initial_runners`) and
    implements :meth:`_new_runner`; changes are serialised by one lock (the steering lock) and
    written to the state file, under that lock, before they take effect; the worker alone writes the
    file.
    """

    def __init__(self, config: MirrorMakerConfig, state_file: str | None) -> None:
        """``config``: as given (:attr:`config`: with the state file's run-time changes over it);
        ``state_file``: where the worker keeps what it is told at run time (None: nowhere)."""
        #: the configuration's own MM2 keys, under the run-time changes (:attr:`overlay`)
        self.base_keys = dict(config.source_keys)
        #: serialises every change of the flows and every write of the state file
        self._steer_lock = asyncio.Lock()
        #: what the worker keeps across restarts; written only by :meth:`_write_state_file`
        self.state_file = StateFile(state_file, self._steer_lock)
        #: the run-time changes as MM2 keys (:mod:`.steering`); kept in the state file
        self.overlay = self.state_file.load()
        #: the configuration in force: :attr:`base_keys` with :attr:`overlay` over them
        self.config = layered(self.base_keys, self.overlay) if self.overlay else config
        #: flows kept PAUSED or STOPPED (tasks shut down) until resumed; kept in the state file
        self.halted: dict[str, str] = self.state_file.section("states")
        #: the Kafka Connect facade's connectors (name -> Connect config); kept in the state file
        self.connectors: dict[str, dict[str, str]] = self.state_file.section("connectors")
        #: each flow's active topics (KIP-558); kept in the state file (told by the data path,
        #: outside the steering lock: written by a task that takes it)
        self.active_topics = ActiveTopics(self.state_file.section("topics"), self._write_state_file_soon)
        #: the flows with names of their own (several per pair); kept in the state file
        self.named = NamedFlows(self.state_file.section("flows"))
        #: the running flows by name; the runtime builds them (:meth:`_initial_runners`)
        self.flows: dict[str, R] = {}
        #: MM2's heartbeats, the flows' first start and its retries, whether the worker started
        self.startup: WorkerStartup[R] = WorkerStartup(self.config, lambda name: self.flows.get(name))

    def _runnable(self) -> list[R]:
        """The flows to start: every one not kept paused or stopped."""
        for name, state in self.halted.items():
            if name in self.flows:
                self.flows[name].state = TaskState(state)
        return [r for name, r in self.flows.items() if name not in self.halted]

    def _new_runner(self, flow: FlowConfig, claims: Claims) -> R:
        raise NotImplementedError

    def _initial_runners(self) -> dict[str, R]:
        """A runner for each enabled unnamed flow, then each named one (oldest first)."""
        flows = self.config.enabled_flows()
        if self.named.names():
            flows += self.named.configs(pair_config(self.base_keys, self.overlay))
        return {f.name: self._runner(f) for f in flows}

    def _runner(self, flow: FlowConfig) -> R:
        """A new runner of ``flow`` that records the topics it writes to in :attr:`active_topics`
        and leaves a topic an older flow of its pair mirrors to that flow."""
        runner = self._new_runner(flow, self._claims(flow))
        runner.on_acknowledged = self.active_topics.record
        return runner

    def _siblings(self, flow: FlowConfig) -> list[tuple[str, Any]]:
        """The other flows of ``flow``'s pair, oldest first: (name, their rule for a topic)."""
        return self.named.siblings(flow, self.flows)

    def _claims(self, flow: FlowConfig) -> Callable[[str], str | None]:
        return lambda topic: self.named.claim(flow, self.flows, topic)

    def resolve(self, source: str, target: str) -> str:
        """The flow a pair-shaped address means: the pair's unnamed flow, else its only flow (a
        pair with several is addressed by name: 409); the pair's name when none runs."""
        pair = pair_name(source, target)
        names = [n for n, r in self.flows.items() if r.flow.pair == pair]
        if pair in self.flows or len(names) <= 1:
            return pair if pair in self.flows or not names else names[0]
        raise FlowConflictError(f"{pair} has {len(names)} flows ({', '.join(names)}): address one by "
                                "its name, /flows/{name}")

    async def reset_active_topics(self, name: str) -> None:
        """Forget flow ``name``'s active topics; each is recorded again when next written to."""

        def forget() -> None:
            self.active_topics.reset(name, save=False)
            if name in self.flows:
                self.flows[name].forget_acknowledged()

        await self.edit_state_file(forget)

    # -- status -----------------------------------------------------------------------------------
    def codec_operations(self) -> tuple[int, int]:
        """Decompressions and compressions done by this worker's tasks (this process's here)."""
        return CodecCounters.snapshot()

    def _status_suffix(self) -> str:
        return ""

    def status_lines(self) -> list[str]:
        """One line per flow: what runs and how far it got."""
        return [f"{flow.status_line()}{self._status_suffix()}" for flow in self.flows.values()]

    def flow(self, name: str) -> R:
        """Flow ``name``; a pair's name (``east->west``) means its only flow when it has no
        unnamed one (:meth:`resolve`)."""
        if name not in self.flows and "->" in name:
            name = self.resolve(*name.split("->", 1))
        try:
            return self.flows[name]
        except KeyError:
            running = ", ".join(self.flows) or "none"
            raise FlowNotFoundError(f"no running flow {name!r} (running: {running})") from None

    async def add_flow(
        self, source: str, target: str, patch: FlowPatch,
        clusters: Mapping[str, Mapping[str, str]] | None = None, *,
        halted: str | None = None, name: str | None = None,
    ) -> R:
        """Start a flow of ``source->target`` with ``patch``'s settings (MM2 names); new clusters
        may come with it. ``name``: the flow's own (a pair may have several flows); none: the pair's
        unnamed flow ``source->target`` (``patch.forget``: earlier HTTP-given settings of it to drop
        first). ``halted`` (``PAUSED`` or ``STOPPED``): created so, no task started until resumed
        (KIP-980). A flow that would mirror a topic another flow of the pair mirrors is refused
        (``FlowConflictError``)."""
        name = check_flow_name(name or pair_name(source, target), source, target)
        if halted is not None and halted not in HALTED_STATES:
            raise ValueError(f"a flow is halted as PAUSED or STOPPED, not {halted!r}")
        async with self._steer_lock:
            if name in self.flows:
                raise FlowExistsError(f"flow {name!r} is already running")
            keys = cluster_keys(self.config, clusters or {})
            overlay = {**self.overlay, **keys}
            config = layered(self.base_keys, overlay) if keys else self.config  # new clusters
            config.flow(source, target)  # unknown cluster?
            own: dict[str, str] | None = None
            if name == pair_name(source, target):
                flow, overlay, config = self._patched(config.flows[name], patch.enabling(), overlay, config)
            else:
                own = patch.text(name)
                flow = pair_config(self.base_keys, overlay).flow(source, target).named(name, own)
            runner = self._runner(flow)
            await check_overlap(flow, runner.controller, self._siblings(flow))
            if halted is not None:
                self.halted[name] = halted
                runner.state = TaskState(halted)
            elif self.startup.started:
                try:
                    await runner.start()
                except BaseException:
                    await runner.stop()
                    raise
            if own is not None:
                self.named.put(name, source, target, own)
            self._commit_overlay(overlay, config)
            self.flows[name] = runner
            self.startup.flow_added(runner.flow)
            return runner

    async def update_flow(self, name: str, patch: FlowPatch) -> R:
        """Change settings of a flow: topic lists and heartbeat settings in place, anything else by
        a restart (a paused or stopped flow stays so). ``patch.forget``: settings given over HTTP
        before to drop first (Kafka Connect's ``PUT .../config`` replaces)."""
        async with self._steer_lock:
            runner = self.flow(name)
            name = runner.flow.name
            if runner.flow.label is None:
                flow, overlay, config = self._patched(runner.flow, patch, self.overlay, self.config)
                own = None
            else:
                own = patch.over(name, self.named.settings(name))
                flow = (self.named.config(name, pair_config(self.base_keys, self.overlay), own)
                        if patch.forgets_any(self.named.settings(name))
                        else runner.flow.patched(patch.text(name), client_keys=False))
                overlay, config = self.overlay, self.config
            changed = changed_settings(runner.flow, flow)
            if changed & FILTER_KEYS:
                await check_overlap(flow, runner.controller, self._siblings(flow))
            if own is not None:
                self.named.put(name, flow.source, flow.target, own)
            self._commit_overlay(overlay, config)
            if changed & HEARTBEAT_KEYS and flow.label is None:
                self.startup.sync_heartbeat(flow)
            if not changed - FILTER_KEYS - HEARTBEAT_KEYS:
                runner.flow = flow
                runner.set_topic_filter(flow.topic_filter())
                if name not in self.halted and changed & FILTER_KEYS:
                    await runner.refresh()
                return runner
            return await self._replace(runner, flow)

    def _patched(self, old: FlowConfig, patch: FlowPatch, overlay: Mapping[str, Any],
                 config: MirrorMakerConfig) -> tuple[FlowConfig, dict[str, Any], MirrorMakerConfig]:
        """A pair's unnamed flow ``old`` (run-time settings: the ``overlay``'s keys under its name)
        after ``patch``: the flow, the overlay and the configuration with it. The patch applies to
        ``old`` itself; when it forgets earlier run-time settings, to the flow as the configuration
        file and the run-time clusters define it, with the run-time settings it keeps."""
        name, prefix = old.name, f"{old.name}."
        earlier = {k[len(prefix):]: v for k, v in overlay.items() if k.startswith(prefix)}
        if patch.forgets_any(earlier):
            kept = patch.over(name, earlier)
            flow = pair_config(self.base_keys, overlay).flow(old.source, old.target).patched(kept)
            overlay = {k: v for k, v in overlay.items()
                       if not k.startswith(prefix) or not patch.forget(k[len(prefix):])}
        else:
            flow = old.patched(patch.text(name))
        overlay = {**overlay, **flow_keys(name, patch.values)}
        return flow, overlay, config.model_copy(update={"flows": {**config.flows, name: flow}})

    async def set_pair_settings(
        self, source: str, target: str, patch: FlowPatch,
        clusters: Mapping[str, Mapping[str, str]] | None = None,
    ) -> FlowConfig:
        """Settings of the pair ``source->target`` that need no running flow (heartbeats): a flow
        of that pair, if one runs, takes them as :meth:`update_flow` does."""
        name = pair_name(source, target)
        if name in self.flows:
            return (await self.update_flow(name, patch)).flow
        async with self._steer_lock:
            keys = cluster_keys(self.config, clusters or {})
            overlay = {**self.overlay, **keys}
            config = layered(self.base_keys, overlay) if keys else self.config  # new clusters
            flow, overlay, config = self._patched(config.flow(source, target), patch, overlay, config)
            self._commit_overlay(overlay, config)
            self.startup.sync_heartbeat(flow)
            return flow

    async def restart_flow(self, name: str) -> R:
        """Stop the flow (its tasks commit their progress) and start it again, e.g. after a failure.
        A paused or stopped flow stays so (resume it instead)."""
        async with self._steer_lock:
            runner = self.flow(name)
            name = runner.flow.name
            return await self._replace(runner, runner.flow)

    async def halt_flow(self, name: str, state: str = TaskState.STOPPED) -> R:
        """Shut the flow's tasks down (they commit their progress) and keep the flow, ``PAUSED`` or
        ``STOPPED`` (KIP-875: only a stopped flow's offsets may be changed), until resumed."""
        if state not in HALTED_STATES:
            raise ValueError(f"a flow is halted as PAUSED or STOPPED, not {state!r}")
        async with self._steer_lock:
            runner = self.flow(name)
            name = runner.flow.name
            was_halted = name in self.halted
            self.halted[name] = state  # first: a runtime's tasks are fenced from here on
            if not was_halted:
                await self._halt_tasks(runner)
            runner.state = TaskState(state)
            self._write_state_file()
            return runner

    async def resume_flow(self, name: str) -> R:
        """Start a paused or stopped flow again, from its committed (or reset) positions."""
        async with self._steer_lock:
            runner = self.flow(name)
            name = runner.flow.name
            if name not in self.halted:
                return runner
            del self.halted[name]
            self._write_state_file()
            return await self._replace(runner, runner.flow)

    async def _halt_tasks(self, runner: R) -> None:
        """End the tasks of a flow being paused or stopped (already in :attr:`halted`); they
        commit their progress, and none writes once this returns."""
        await runner.stop()

    def _check_no_writers(self, name: str) -> None:
        """Raise ``FlowStateError`` while a task of the stopped flow ``name`` may still write (a
        runtime whose tasks can outlive :meth:`_halt_tasks`)."""

    async def reset_offsets(
        self, name: str, changes: Mapping[TopicPartition, Reset | None] | None,
    ) -> list[PartitionOffset]:
        """Move flow ``name``'s committed source positions (a partition mapped to ``None`` is
        forgotten, ``changes=None`` forgets them all); only while the flow is stopped or (an
        unnamed flow) not running here, so that no task commits over the new positions."""
        async with self._steer_lock:
            name = self.flow_config(name).name
            runner = self.flows.get(name)
            if runner is not None and self.halted.get(name) != TaskState.STOPPED:
                raise FlowStateError(
                    f"flow {name!r} is {runner.state}: its offsets can be changed only while it is "
                    "STOPPED (stop it first; it resumes from the new positions)")
            self._check_no_writers(name)
            return await reset_offsets(self.flow_config(name), changes)

    def flow_config(self, name: str) -> FlowConfig:
        """The configuration of flow ``name``: running (:meth:`flow`), or a configured pair's
        unnamed flow."""
        if name in self.flows or "->" not in name:
            return self.flow(name).flow
        source, target = name.split("->", 1)
        resolved = self.resolve(source, target)
        return self.flows[resolved].flow if resolved in self.flows else self.config.flow(source, target)

    async def remove_flow(self, name: str) -> None:
        """Stop the flow and disable it; its progress stays on the target for a later restart."""
        async with self._steer_lock:
            runner = self.flow(name)
            name = runner.flow.name
            was_halted = self.halted.pop(name, None) is not None
            runner.on_acknowledged = None  # what its tasks settle while stopping is not recorded
            self.active_topics.reset(name, save=False)  # as Connect forgets a deleted connector's
            if runner.flow.label is None:
                overlay = {**self.overlay, f"{name}.enabled": "false"}
                self._commit_overlay(overlay, layered(self.base_keys, overlay))
            else:
                self.named.remove(name)
                self._write_state_file()
            del self.flows[name]
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
        elif self.startup.started:
            await fresh.start()
        return fresh

    def _commit_overlay(self, overlay: dict[str, Any], config: MirrorMakerConfig) -> None:
        self.overlay, self.config = overlay, config
        self._write_state_file()

    # -- the state file ---------------------------------------------------------------------------
    def _write_state_file(self) -> None:
        """The one place the state file is written: the overlay and every section as they are now,
        while the steering lock is held (:class:`StateFile` refuses otherwise)."""
        self.state_file.write(self.overlay)

    async def edit_state_file(self, edit: Callable[[], T]) -> T:
        """Make ``edit`` — a change of what the state file keeps beside the flows (the Connect
        facade's connectors and their states, active topics) — under the steering lock, then write
        the file; ``edit``'s answer. A steering change already under way finishes first."""
        async with self._steer_lock:
            done = edit()
            self._write_state_file()
            return done

    def _write_state_file_soon(self) -> None:
        """A change made outside the steering lock, on the event loop (a flow's new active topic):
        written by a task that takes the lock (:meth:`StateFile.write_soon`)."""
        self.state_file.write_soon(lambda: self.edit_state_file(_nothing))


def _nothing() -> None:
    """No change: :meth:`WorkerBase.edit_state_file` just writes what is new."""


