"""The mirror host: one long-lived process per Spark executor that runs every lease placed on it.

The driver submits one Spark job per host (:mod:`mm2py.runtime.spark.driver.host_pool`); its one
Spark task is :func:`run_host`, which connects to the driver's lease server and says HOST_HELLO,
then runs whatever leases the driver places on it (START, with the lease's pickled
:class:`~.lease.LeaseWork`) on one event loop, until the driver stops it or can no longer be heard.
Each lease lives exactly as a lease of its own would (:func:`~.lease.hold_lease`: HELLO, build,
READY, GO, mirror, commit, RELEASE, the same fencing), but on the host's one connection and, for
the leases of one flow, on one set of clients (:class:`~mm2py.connectors.mirror_task.FlowClients`:
one fetch session per source broker, Produce requests of all its tasks sharing connections). So a
successor on the same host costs a task build, not a Spark job, a process and new sessions, and the
cost of a Spark worker grows with its data, not with its leases. When a lease ends the host says
ENDED with what its own Spark job would have returned.

Invariants:

- **HOST_FENCE**: the host's connection closing halts every lease on it (each commits what it
  acknowledged and ends); each lease also keeps its own fence (no ack for a fence interval: it
  stops by itself), so a host that can still write never outlives the driver's view of its leases.
- **SHARED_UNTIL_LAST**: a flow's clients on a host are shared by its leases of one configuration
  and closed when the last of them ends (a reconfigured flow's leases get clients of their own).

This module does not import pyspark: executors only need mm2py and its dependencies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import resource
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mm2py.client.request_counts import REQUESTS
from mm2py.runtime.loop_watch import LoopWatch, freeze_start_up_heap
from mm2py.runtime.spark.executor.common import capture_warnings
from mm2py.runtime.spark.executor.lease import (
    LeaseLink,
    LeaseResult,
    LeaseWork,
    failed,
    hold_lease,
    new_result,
)
from mm2py.runtime.spark.lease_messages import (
    Ack,
    Ended,
    GoMsg,
    Hello,
    HostHello,
    HostStats,
    Ready,
    Released,
    Report,
    StartLease,
    StopMsg,
    decode,
    encode,
    open_line_connection,
)

log = logging.getLogger(__name__)

__all__ = ["HostResult", "HostWork", "run_host"]


@dataclass(frozen=True)
class HostWork:
    """What an executor needs to run a mirror host (picklable)."""

    host_id: str
    coordinator: tuple[str, int]  # the driver's lease server
    token: str
    stats_interval: float = 1.0  # how often it says HOST_STATS


@dataclass
class HostResult:
    """What a host's Spark job returns when the host stops (picklable, small)."""

    host_id: str
    executor: str
    leases: int = 0  # leases it ran
    reason: str = ""  # why it stopped
    error: str | None = None
    seconds: float = 0.0


def executor_name() -> str:
    """This executor as the logs name it: its host name and the Python daemon its workers fork
    from (one per executor)."""
    return f"{socket.gethostname()}:{os.getppid()}"


def _task_context() -> Any:
    """The Spark task this runs in (None outside Spark). Read from the pyspark worker that runs it,
    which has loaded pyspark: executor modules import no pyspark of their own (they run outside
    Spark in tests)."""
    pyspark = sys.modules.get("pyspark")
    return pyspark.TaskContext.get() if pyspark is not None else None


def task_attempt() -> int:
    """The attempt number of the Spark task this runs in (0: the first; Spark runs a task again
    when its executor was lost), 0 outside Spark."""
    ctx = _task_context()
    return int(ctx.attemptNumber()) if ctx is not None else 0


class _HostLink(LeaseLink):
    """A lease's channel over its host's connection."""

    def __init__(self, host: _Host, work: LeaseWork) -> None:
        super().__init__(work)
        self.host = host
        #: the driver's answer to this lease's HELLO: ACK, or STOP (refused)
        self.answer: asyncio.Future[Ack | StopMsg] = asyncio.get_running_loop().create_future()

    async def open(self) -> _HostLink | StopMsg:
        await self.host.send(Hello(self.work.lease_id, self.work.token))
        answer = await asyncio.wait_for(self.answer, 30)
        return self if isinstance(answer, Ack) else answer

    def route(self, msg: GoMsg | StopMsg | Ack) -> None:
        """The driver's message for this lease: the HELLO's answer first, then the lease's."""
        if not self.answer.done() and isinstance(msg, Ack | StopMsg):
            self.answer.set_result(msg)
            if isinstance(msg, StopMsg):
                self._halt(msg.reason)
            return
        self.deliver(msg)

    def cut(self, reason: str) -> None:
        """HOST_FENCE: the host's connection is gone."""
        if not self.answer.done():
            self.answer.set_result(StopMsg(reason))
        self._halt(reason)

    async def send(self, msg: Ready | Report | Released) -> None:
        await self.host.send(msg)

    async def close(self) -> None:
        self.host.links.pop(self.work.lease_id, None)


@dataclass
class _SharedClients:
    flow: Any  # the FlowConfig they were made for
    clients: Any  # mm2py.connectors.mirror_task.FlowClients
    users: int = 0


@dataclass
class _Host:
    work: HostWork
    result: HostResult
    #: lease id -> its channel, while the lease lives (messages for others are dropped)
    links: dict[str, _HostLink] = field(default_factory=dict)
    #: lease id -> the coroutine running it
    leases: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    #: SHARED_UNTIL_LAST: flow name -> the clients of its leases here, per configuration
    shared: dict[str, list[_SharedClients]] = field(default_factory=dict)
    writer: asyncio.StreamWriter | None = None

    async def send(self, msg: HostHello | HostStats | Hello | Ready | Report | Released | Ended) -> None:
        writer = self.writer
        if writer is None or writer.is_closing():
            raise ConnectionError("the host's connection to the driver is closed")
        writer.write(encode(msg))
        await writer.drain()

    async def run(self) -> None:
        w = self.work
        reader, writer = await open_line_connection(w.coordinator)
        self.writer = writer
        try:
            await self.send(HostHello(w.host_id, w.token, self.result.executor, task_attempt()))
            answer = decode(await asyncio.wait_for(reader.readline(), 30))
            if not isinstance(answer, Ack):
                self.result.reason = (answer.reason if isinstance(answer, StopMsg)
                                      else f"unexpected answer {answer!r}")
                return
            stats = asyncio.create_task(self._say_stats())
            # as the in-process worker's: the executor's start-up objects out of later
            # collections, and a stalled loop (it delays every lease here) said, with where
            freeze_start_up_heap()
            watch = LoopWatch()
            watch.start()
            try:
                self.result.reason = await self._serve(reader)
            finally:
                stats.cancel()
                watch.stop()
            for link in list(self.links.values()):  # HOST_FENCE
                link.cut(self.result.reason)
            if self.leases:
                await asyncio.wait(list(self.leases.values()))
        finally:
            writer.close()
            for entries in self.shared.values():
                for entry in entries:
                    with contextlib.suppress(Exception):
                        await entry.clients.close()

    async def _serve(self, reader: asyncio.StreamReader) -> str:
        """The driver's messages until it stops this host or the connection ends: why it ended."""
        try:
            while line := await reader.readline():
                msg = decode(line)
                if isinstance(msg, StartLease):
                    work: LeaseWork = pickle.loads(msg.work)  # from this run's driver (token)
                    self.leases[work.lease_id] = asyncio.create_task(self._lease(work))
                elif isinstance(msg, StopMsg) and not msg.lease:
                    return f"the driver stopped the host: {msg.reason}"
                elif isinstance(msg, GoMsg | StopMsg | Ack):
                    link = self.links.get(msg.lease)
                    if link is not None:
                        link.route(msg)
            return "the driver closed the host's connection"
        except Exception as exc:
            return f"the host's connection failed: {exc}"

    async def _say_stats(self) -> None:
        """HOST_STATS every stats interval, until the connection fails."""
        with contextlib.suppress(ConnectionError):
            while True:
                await self.send(own_stats(self.work))
                await asyncio.sleep(self.work.stats_interval)

    async def _lease(self, work: LeaseWork) -> None:
        result = new_result(work)
        result.executor = self.result.executor
        started = time.monotonic()
        link = _HostLink(self, work)
        self.links[work.lease_id] = link
        self.result.leases += 1
        entry: _SharedClients | None = None
        with capture_warnings() as warnings:
            try:  # a flow whose clients cannot even be made fails its lease, not the host
                entry = self._clients_for(work)
                await hold_lease(work, result, link.open(), entry.clients)
            except Exception as exc:
                failed(result, exc)
            finally:
                self.links.pop(work.lease_id, None)
                if entry is not None:
                    await self._let_go(work, entry)
        result.warnings = warnings
        result.seconds = time.monotonic() - started
        with contextlib.suppress(Exception):
            await self.send(ended(work, result))
        self.leases.pop(work.lease_id, None)

    def _clients_for(self, work: LeaseWork) -> _SharedClients:
        from mm2py.connectors.mirror_task import FlowClients  # runtime composes connectors

        flow = work.spec.flow
        entries = self.shared.setdefault(flow.name, [])
        entry = next((e for e in entries if e.flow == flow), None)
        if entry is None:
            entry = _SharedClients(flow, FlowClients(flow))
            entries.append(entry)
        entry.users += 1
        return entry

    async def _let_go(self, work: LeaseWork, entry: _SharedClients) -> None:
        entry.users -= 1
        if entry.users == 0:  # SHARED_UNTIL_LAST
            entries = self.shared.get(work.spec.flow.name, [])
            if entry in entries:
                entries.remove(entry)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(entry.clients.close(), 30)


def ended(work: LeaseWork, result: LeaseResult) -> Ended:
    """A lease's result as the host reports it to the driver."""
    from mm2py.engine.task_contract import RUN_COUNTERS

    m = result.metrics
    return Ended(work.lease_id, work.token, result.granted, result.error, result.halted,
                 dict(result.positions), {n: int(getattr(m, n)) for n in RUN_COUNTERS}, result.codec,
                 dict(m.times), tuple(result.warnings), result.seconds, result.executor)


def own_stats(work: HostWork) -> HostStats:
    """This process's figures: the requests its connections sent, its CPU and resident memory."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    try:
        rss = int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()
    except (OSError, IndexError, ValueError):  # no /proc: the peak instead (KiB on Linux)
        rss = usage.ru_maxrss * 1024
    return HostStats(work.host_id, work.token, REQUESTS.snapshot(), usage.ru_utime + usage.ru_stime, rss)


def log_to_stderr() -> None:
    """In a Spark task, mm2py's INFO lines to this process's stderr, which Spark keeps as the
    executor's log (its UI shows it), unless mm2py's logging was configured here already."""
    logger = logging.getLogger("mm2py")
    if _task_context() is not None and not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def run_host(work: HostWork) -> HostResult:
    """Run a mirror host on this process (an executor) until the driver stops it; never raises."""
    log_to_stderr()
    result = HostResult(work.host_id, executor_name())
    started = time.monotonic()
    try:
        asyncio.run(_Host(work, result).run())
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    result.seconds = time.monotonic() - started
    return result
