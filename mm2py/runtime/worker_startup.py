"""A worker's start-up, shared by both runtimes: MM2's heartbeats (one emitter per cluster pair) and
the flows' first start, retried in the background while a cluster is unreachable.

:class:`WorkerStartup` is a collaborator the worker holds (``WorkerBase.startup``), built with the
worker; it owns the heartbeat emitters and their tasks, the start retries, and whether the worker
has started. The flows are the worker's: it is handed a way to look one up by name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.connectors.heartbeat import HeartbeatEmitter
from mm2py.engine.scheduler import Scheduler
from mm2py.errors import ClusterUnreachableError
from mm2py.rdkafka.cluster_health import admin_calls_interrupted
from mm2py.runtime.flows import FlowRunnerBase

__all__ = ["HEARTBEAT_KEYS", "WorkerStartup"]

log = logging.getLogger(__name__)

R = TypeVar("R", bound=FlowRunnerBase[Any])

#: settings only the worker's heartbeat emitter reads: no flow restart for them
HEARTBEAT_KEYS = frozenset({"emit.heartbeats.enabled", "emit.heartbeats.interval.seconds",
                            "heartbeats.topic.replication.factor"})


class WorkerStartup(Generic[R]):
    """Heartbeats and flow starts of one worker: :meth:`begin` when the worker starts, :meth:`stop`
    when it stops; :meth:`flow_added` and :meth:`sync_heartbeat` as its flows change."""

    def __init__(self, config: MirrorMakerConfig, flow_named: Callable[[str], R | None]) -> None:
        """``config``: the worker's configuration (every cluster pair's heartbeat settings);
        ``flow_named``: the worker's flow of that name now, if any."""
        #: the worker's flows, looked up by name: a start retried in the background is dropped once
        #: its flow was replaced or removed (the worker owns its flows)
        self._flow_named = flow_named
        #: each cluster pair's heartbeat emitter (its unnamed flow's settings; named flows emit
        #: none): like MM2, every pair emits them unless told not to, enabled flow or not
        self.heartbeats: dict[str, HeartbeatEmitter] = {}
        #: whether the worker has started: a flow added from then on starts at once, and a new
        #: pair's heartbeats begin; set by :meth:`begin` only
        self.started = False
        #: set when the worker stops (:meth:`stop`): ends the heartbeats and the start retries
        self.stopping = asyncio.Event()
        #: each pair's running heartbeat emitter, by pair; started by :meth:`begin` or when added
        self._beats: dict[str, asyncio.Task[None]] = {}
        #: the starts retried in the background, one per flow whose cluster was unreachable
        self.retries: list[asyncio.Task[None]] = []
        for f in config.heartbeat_flows():
            self._add_heartbeat(f)

    # -- heartbeats -------------------------------------------------------------------------------
    def _add_heartbeat(self, flow: FlowConfig) -> None:
        """The pair's emitter (heartbeats are per pair: its unnamed flow's settings; named flows
        emit none)."""
        if flow.label is None and flow.emit_heartbeats_enabled and flow.emit_heartbeats_interval_seconds >= 0:
            self.heartbeats.setdefault(flow.name, HeartbeatEmitter(flow))

    def _start_heartbeats(self) -> None:
        for name, h in self.heartbeats.items():
            if name not in self._beats:
                self._beats[name] = asyncio.create_task(h.run(self.stopping))

    def begin(self) -> None:
        """The worker starts: flows added from now on start at once; the heartbeats begin."""
        self.started = True
        self._start_heartbeats()

    def flow_added(self, flow: FlowConfig) -> None:
        self._add_heartbeat(flow)
        if self.started:
            self._start_heartbeats()

    def sync_heartbeat(self, flow: FlowConfig) -> None:
        """Start or stop the pair's heartbeats after ``emit.heartbeats.*`` changed."""
        beat = self._beats.pop(flow.name, None)
        if beat is not None:
            beat.cancel()
        self.heartbeats.pop(flow.name, None)
        self.flow_added(flow)

    async def stop(self) -> list[asyncio.Task[None]]:
        """The worker stops: the heartbeats are told to end and the start retries are cancelled
        (and awaited); the heartbeat tasks, for the worker to await with its flows' stops."""
        self.stopping.set()
        for task in self.retries:
            task.cancel()
        await asyncio.gather(*self.retries, return_exceptions=True)
        self.retries.clear()
        return list(self._beats.values())

    # -- start-up ---------------------------------------------------------------------------------
    async def start_flows(self, runners: Iterable[R]) -> None:
        """Start every flow. A flow whose cluster cannot be reached is left FAILED (its status says
        why) and started again in the background (a one-off job of the flow's scheduler: by
        default 5 s later, then 10, 20, 40, 60, 60 ... s later; ``mm2py.start.retry.backoff.ms``
        and ``.max.ms``) while the worker and its other flows run; any other start failure (a
        configuration refused by a broker, say) stops the worker."""
        runners = list(runners)
        outcomes = await asyncio.gather(*(r.start() for r in runners), return_exceptions=True)
        for runner, outcome in zip(runners, outcomes, strict=True):
            if isinstance(outcome, ClusterUnreachableError) and admin_calls_interrupted():
                log.info("%s: not started: %s", runner.flow.name, outcome)  # Ctrl-C during start-up
            elif isinstance(outcome, ClusterUnreachableError):
                log.error("%s: not started: %s; trying again in the background", runner.flow.name, outcome)
                self.retries.append(asyncio.create_task(self._retry_start(runner)))
            elif isinstance(outcome, BaseException):
                raise outcome

    async def _retry_start(self, runner: R) -> None:
        """The flow's start as a one-off job of its own scheduler, retried with back-off while its
        cluster stays unreachable; any other failure gives up (the flow stays FAILED)."""
        name = runner.flow.name

        async def start() -> None:
            if self._flow_named(name) is not runner:
                return  # the flow was replaced or removed meanwhile
            try:
                await runner.start()
            except ClusterUnreachableError:
                raise  # the scheduler logs it and tries again later
            except Exception as exc:
                log.error("%s: start failed: %s", name, exc)
                return
            log.info("%s: started", name)

        jobs = Scheduler(name, self.stopping)
        first = runner.flow.start_retry_backoff_ms / 1000
        longest = max(2 * first, runner.flow.start_retry_backoff_max_ms / 1000)
        jobs.once("delayed start", start, delay=first, retry=2 * first, backoff=2.0, max_retry=longest)
        await jobs.run()
