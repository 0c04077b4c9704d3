"""The start-up half of a worker, shared by both runtimes: MM2's heartbeats (one emitter per cluster
pair) and the flows' first start, retried in the background while a cluster is unreachable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.connectors.heartbeat import HeartbeatEmitter
from mm2py.engine.scheduler import Scheduler
from mm2py.errors import ClusterUnreachableError
from mm2py.runtime.flows import FlowRunnerBase
from mm2py.stores.cluster_health import admin_calls_interrupted

__all__ = ["WorkerStartup"]

log = logging.getLogger(__name__)

R = TypeVar("R", bound=FlowRunnerBase[Any])


class WorkerStartup(Generic[R]):
    """Heartbeats and flow starts (:class:`~mm2py.runtime.worker_base.WorkerBase` builds on it)."""

    flows: dict[str, R]
    _started: bool

    # -- heartbeats: like MM2, every cluster pair emits them unless told not to, enabled flow or not
    def _init_heartbeats(self, config: MirrorMakerConfig) -> None:
        self.heartbeats: dict[str, HeartbeatEmitter] = {}
        for f in config.heartbeat_flows():
            self._add_heartbeat(f)
        self._beats_stop = asyncio.Event()  # also ends the start retries (_retry_start)
        self._beats: dict[str, asyncio.Task[None]] = {}
        self._retries: list[asyncio.Task[None]] = []

    def _add_heartbeat(self, flow: FlowConfig) -> None:
        """The pair's emitter (heartbeats are per pair: its unnamed flow's settings; named flows
        emit none)."""
        if flow.label is None and flow.emit_heartbeats_enabled and flow.emit_heartbeats_interval_seconds >= 0:
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
            if isinstance(outcome, ClusterUnreachableError) and admin_calls_interrupted():
                log.info("%s: not started: %s", runner.flow.name, outcome)  # Ctrl-C during start-up
            elif isinstance(outcome, ClusterUnreachableError):
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

