"""One lease of one mirror task, as the Spark runtime runs it on an executor.

The driver (:mod:`mm2py.runtime.spark.driver.worker`) submits one Spark job per lease with a
:class:`LeaseWork` (plain picklable data). :func:`run_lease` says HELLO to the driver's coordinator
first (a second attempt of a lease is refused before it builds anything), builds the task with the
same code the in-process runtime uses (``mm2py.connectors.mirror_task.build_task``), says READY and waits
for GO, which comes once no other lease holds its partitions, with the positions the predecessor
released (so it neither re-reads the progress topic nor walks the target tail for them). Then it
mirrors continuously, exactly as the in-process ``TaskRunner.run`` does — new data as it arrives, a
commit every commit interval — reporting its metrics to the driver every report interval, until the
driver says STOP (a successor is ready, the assignment changed, the worker stops) or it cannot hear
the driver for a fence interval. It then commits and RELEASES: each partition's position and target
offset. No produce outcome is in doubt then: a failure that may have left batches on the target
past the acknowledged positions fails the task (the lease ends without a release, and its
successor loads the committed positions and reconciles the target's tail).


A lease never raises: whatever went wrong is in :attr:`LeaseResult.error`. This module does not
import pyspark: executors only need mm2py and its dependencies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from mm2py.engine.losses import MirrorAlarmError
from mm2py.engine.task import TaskRunner
from mm2py.engine.task_contract import RUN_COUNTERS, TaskMetrics, TaskSpec
from mm2py.protocol.compression import CodecCounters
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.loop_watch import freeze_start_up_heap
from mm2py.runtime.spark.executor.common import capture_warnings
from mm2py.runtime.spark.lease_messages import (
    Ack,
    GoMsg,
    Hello,
    Ready,
    Released,
    Report,
    StopMsg,
    decode,
    encode,
    open_line_connection,
)

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class LeaseWork:
    """What an executor needs for one lease of one task (picklable)."""

    spec: TaskSpec
    lease_id: str
    coordinator: tuple[str, int]  # the driver's lease server
    token: str
    commit_interval: float = 1.0
    report_interval: float = 0.5
    fence_seconds: float = 4.0  # no answer from the driver for this long: stop mirroring
    max_seconds: float = 600.0  # a lease never runs longer (the driver normally stops it sooner)
    wait_seconds: float = 120.0  # how long to wait for GO before giving up

    @property
    def flow(self) -> str:
        return str(self.spec.flow.name)


@dataclass
class LeaseResult:
    """What an executor reports at the end of a lease (picklable, small)."""

    flow: str
    task_id: int
    lease_id: str
    partitions: tuple[TopicPartition, ...]
    granted: bool = False  # GO came: the lease held its partitions
    positions: dict[TopicPartition, int] = field(default_factory=dict)  # committed (empty on error)
    metrics: TaskMetrics = field(default_factory=TaskMetrics)
    codec: tuple[int, int] = (0, 0)
    error: str | None = None
    #: the error is an alarm under ``fail`` (engine/losses.py): the task is not started again
    halted: bool = False
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    executor: str = ""


class LeaseLink:
    """A lease's channel to the driver: the driver's GO/STOP/acks in, its messages out. A lease
    of its own has a connection of its own (:class:`_Link`); leases on a mirror host share the
    host's (``executor/host.py``)."""

    def __init__(self, work: LeaseWork) -> None:
        self.work = work
        self.last_ack = time.monotonic()
        self.go: asyncio.Future[GoMsg | StopMsg] = asyncio.get_running_loop().create_future()
        self.stop = asyncio.Event()  # STOP came, or the driver can no longer be heard
        self.stop_reason = ""

    async def send(self, msg: Ready | Report | Released) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    def deliver(self, msg: GoMsg | StopMsg | Ack) -> None:
        """One message of the driver's for this lease."""
        if isinstance(msg, GoMsg) and not self.go.done():
            self.go.set_result(msg)
        elif isinstance(msg, StopMsg):
            self._halt(msg.reason)
        elif isinstance(msg, Ack):
            self.last_ack = time.monotonic()

    def _halt(self, reason: str) -> None:
        if not self.stop.is_set():
            self.stop_reason = reason
            self.stop.set()
        if not self.go.done():
            self.go.set_result(StopMsg(reason))

    def fenced(self) -> bool:
        return time.monotonic() - self.last_ack > self.work.fence_seconds


class _Link(LeaseLink):
    """A lease's own connection to the driver: HELLO, reports, the driver's GO/STOP/acks."""

    def __init__(self, work: LeaseWork, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(work)
        self.reader, self.writer = reader, writer
        self._listener = asyncio.create_task(self._listen())

    @classmethod
    async def open(cls, work: LeaseWork) -> _Link | StopMsg:
        """Connect and say HELLO: the link once the driver ACKs, or its STOP (attempt refused)."""
        reader, writer = await open_line_connection(work.coordinator)
        writer.write(encode(Hello(work.lease_id, work.token)))
        await writer.drain()
        try:
            answer = decode(await asyncio.wait_for(reader.readline(), 30))
        except BaseException:
            writer.close()
            raise
        if not isinstance(answer, Ack):
            writer.close()
            return answer if isinstance(answer, StopMsg) else StopMsg(f"unexpected answer {answer!r}")
        return cls(work, reader, writer)

    async def send(self, msg: Ready | Report | Released) -> None:
        self.writer.write(encode(msg))
        await self.writer.drain()

    async def _listen(self) -> None:
        try:
            while line := await self.reader.readline():
                msg = decode(line)
                if isinstance(msg, GoMsg | StopMsg | Ack):
                    self.deliver(msg)
            self._halt("the driver closed the lease connection")
        except Exception as exc:
            self._halt(f"the lease connection failed: {exc}")

    async def close(self) -> None:
        self._listener.cancel()
        with contextlib.suppress(BaseException):
            await self._listener
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


@dataclass
class StartTimes:
    """When a lease's start-up steps ended (monotonic s), for its one INFO line at its first batch."""

    began: float  # its work in hand (on a host: START read)
    answered: float = 0.0  # its HELLO answered
    built: float = 0.0  # its task built (clients connected, metadata of its topics)
    go: float = 0.0  # GO read (positions carried over, or none: it loads and reconciles)
    first_batch: float | None = None  # its first batch acknowledged, seen at a report interval

    def __str__(self) -> str:
        def at(t: float | None) -> str:
            return "-" if t is None else f"{t - self.began:.1f} s"

        return (f"first batch on the target within {at(self.first_batch)} of its start (HELLO answered "
                f"{at(self.answered)}, task built {at(self.built)}, GO {at(self.go)})")


def _report(work: LeaseWork, runner: TaskRunner, codec_start: tuple[int, int],
            sent: dict[TopicPartition, tuple[float, float, float]],
            lag_sent: dict[TopicPartition, int]) -> Report:
    """The lease's figures; of its partitions' times and lag only those that changed since the
    last report (``sent``, ``lag_sent``: what each partition's last report said; the driver
    updates its view with them), so a report of a lease of thousands of partitions carries the
    few that moved, not all of them every half second."""
    m = runner.metrics
    d, c = CodecCounters.snapshot()
    times = {}
    for tp, t in m.times.items():
        said = (t.replication.total, t.age.total, t.lag_seconds)
        if sent.get(tp) != said:
            sent[tp] = said
            times[tp] = t
    lag = {tp: v for tp, v in m.lag.items() if lag_sent.get(tp) != v}
    lag_sent.update(lag)
    return Report(work.lease_id, work.token, {n: int(getattr(m, n)) for n in RUN_COUNTERS}, lag,
                  (d - codec_start[0], c - codec_start[1]), times, tuple(runner.held_partitions),
                  tuple(runner.refused_partitions), tuple(runner.waiting_for_target))


async def _hold(work: LeaseWork, runner: TaskRunner, link: LeaseLink, codec_start: tuple[int, int],
                start: StartTimes) -> None:
    """Mirror until STOP, the fence, or the lease's end; report meanwhile."""
    started = time.monotonic()
    sent: dict[TopicPartition, tuple[float, float, float]] = {}
    lag_sent: dict[TopicPartition, int] = {}
    running = asyncio.create_task(runner.run(link.stop))
    while not running.done():
        await asyncio.wait({running}, timeout=work.report_interval)
        if running.done():
            break
        if runner.metrics.batches and start.first_batch is None:
            start.first_batch = time.monotonic()
            log.info("lease %s: %s", work.lease_id, start)
        if link.fenced():
            link._halt(f"no answer from the driver for {work.fence_seconds:.0f}s")
        elif time.monotonic() - started >= work.max_seconds:
            link._halt("the lease reached its longest time")
        with contextlib.suppress(Exception):
            await link.send(_report(work, runner, codec_start, sent, lag_sent))
    await running  # the task's own failure (e.g. a corrupt batch it refused to forward)


async def _lease(work: LeaseWork, result: LeaseResult) -> None:
    """One lease on a connection of its own, its task on clients of its own."""
    await hold_lease(work, result, _Link.open(work))


async def hold_lease(work: LeaseWork, result: LeaseResult, opening: Awaitable[LeaseLink | StopMsg],
                     clients: Any = None) -> None:
    """The lease's life: HELLO (``opening``), build, READY, GO, mirror, commit, RELEASE. ``clients``:
    the ``FlowClients`` the flow's leases on one mirror host share (None: the task's own, and the
    process is this lease's: its start-up heap is frozen once the task is built)."""
    from mm2py.connectors.mirror_task import build_task  # runtime composes connectors

    codec_start = CodecCounters.snapshot()
    start = StartTimes(time.monotonic())
    opened = await opening  # who it is, before the seconds a task takes to build
    start.answered = time.monotonic()
    if isinstance(opened, StopMsg):
        log.info("lease %s: not started: %s", work.lease_id, opened.reason)
        return  # refused (e.g. Spark re-ran a lease already started): it builds and writes nothing
    link = opened
    try:
        runner = await asyncio.wait_for(
            build_task(work.spec, commit_interval=work.commit_interval, clients=clients), 60)
    except BaseException:
        await link.close()
        raise
    start.built = time.monotonic()
    if clients is None:
        freeze_start_up_heap()  # the executor's start-up objects stay out of later collections
    try:
        result.metrics = runner.metrics
        await link.send(Ready(work.lease_id, work.token))
        go = await asyncio.wait_for(link.go, work.wait_seconds)
        start.go = time.monotonic()
        if isinstance(go, StopMsg):
            return  # never granted: it held nothing, wrote nothing
        result.granted = True
        runner.seed({tp: pos for tp, pos in go.positions.items() if pos is not None})
        await _hold(work, runner, link, codec_start, start)
        # run() commits on its way out but cannot say whether that worked; an empty bound makes
        # run_until commit again (nothing new, so nothing is written) and raise if it cannot
        await runner.run_until({}, timeout=60)
        committed = runner.committed_positions()
        result.positions = {tp: pos.source for tp, pos in committed.items()}
        with contextlib.suppress(Exception):
            await link.send(Released(work.lease_id, work.token, dict(committed)))
    finally:
        d, c = CodecCounters.snapshot()
        result.codec = (d - codec_start[0], c - codec_start[1])
        await link.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(runner.close(), 30)


def new_result(work: LeaseWork) -> LeaseResult:
    return LeaseResult(work.flow, work.spec.task_id, work.lease_id, tuple(work.spec.partitions),
                       executor=f"{socket.gethostname()}:{os.getpid()}")


def failed(result: LeaseResult, exc: Exception) -> None:
    """The lease ended on ``exc``: nothing of it counts as committed."""
    result.error = f"{type(exc).__name__}: {exc}"
    result.halted = isinstance(exc, MirrorAlarmError)
    result.positions = {}


def run_lease(work: LeaseWork) -> LeaseResult:
    """Run one lease of one task on this process (an executor); never raises."""
    result = new_result(work)
    started = time.monotonic()
    with capture_warnings() as warnings:
        try:
            asyncio.run(_lease(work, result))
        except Exception as exc:
            failed(result, exc)
    result.warnings = warnings
    result.seconds = time.monotonic() - started
    return result
