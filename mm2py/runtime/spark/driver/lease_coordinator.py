"""The Spark driver's end of the lease connections: a small asyncio server around a :class:`LeaseTable`.

Executors connect to ``host:port`` (sent to them in each lease's work), say HELLO (accepted with
an ACK or refused with STOP), READY once their task is built, report every
report interval and RELEASE at the end; the coordinator feeds those events, Spark job ends and
time into the table and carries its GO/STOP actions back over the connections. Reports reach the
driver's metrics through ``on_report`` while the lease runs, not only when it ends.

A mirror host (``executor/host.py``) connects once and says HOST_HELLO (``on_host`` accepts it); the
driver places leases on it with :meth:`LeaseCoordinator.place`, and each of them then says HELLO,
READY, reports and RELEASED on the host's connection as a lease of its own would on its own. Its
ENDED goes to ``on_ended``; the host's connection closing is every one of its leases' closing
(``on_host_gone`` is told too). Its last HOST_STATS is kept on its line (``HostLine.stats``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mm2py.engine.scheduler import Scheduler
from mm2py.runtime.spark.driver.lease_table import Go, Lease, LeaseTable, Stop
from mm2py.runtime.spark.lease_messages import (
    MAX_LINE,
    Ack,
    Ended,
    GoMsg,
    Hello,
    HostHello,
    HostStats,
    LeaseWireError,
    Message,
    Ready,
    Released,
    Report,
    StartLease,
    StopMsg,
    decode,
    encode,
)

log = logging.getLogger(__name__)

__all__ = ["HostLine", "LeaseCoordinator"]


@dataclass(eq=False)
class HostLine:
    """A mirror host's connection: its writer and the leases that said HELLO on it."""

    host_id: str
    executor: str
    writer: asyncio.StreamWriter
    leases: set[str] = field(default_factory=set)
    attempt: int = 0  # the Spark task attempt it runs in (0: the first)
    stats: HostStats | None = None  # the last HOST_STATS it said

    def send(self, msg: Message) -> bool:
        if self.writer.is_closing():
            return False
        self.writer.write(encode(msg))
        return True


class LeaseCoordinator:
    def __init__(
        self, table: LeaseTable, *, host: str = "127.0.0.1",
        on_report: Callable[[Lease, Report], None] | None = None,
        tick_seconds: float = 0.2,
        on_host: Callable[[HostLine], bool] | None = None,
        on_host_gone: Callable[[HostLine], None] | None = None,
        on_ended: Callable[[Ended], None] | None = None,
    ) -> None:
        self.table = table
        self.host = host
        self.port = 0
        self.token = secrets.token_hex(16)  # only this run's executors may talk to us
        self.on_report = on_report
        self.on_host = on_host  # a host said HOST_HELLO: accept it?
        self.on_host_gone = on_host_gone
        self.on_ended = on_ended  # a lease ended on a host
        self.tick_seconds = tick_seconds
        self._conns: dict[str, asyncio.StreamWriter] = {}  # lease id -> its executor's connection
        self._server: asyncio.Server | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, 0, limit=MAX_LINE)
        self.port = self._server.sockets[0].getsockname()[1]
        jobs = Scheduler("lease coordinator", self._closing)
        jobs.every("lease table tick", self.tick_seconds, self._tick, delay=self.tick_seconds, quiet=True)
        self._ticker = asyncio.create_task(jobs.run())

    async def close(self) -> None:
        self._closing.set()
        if self._ticker is not None:
            with contextlib.suppress(BaseException):
                await self._ticker
        for writer in list(self._conns.values()):
            writer.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    # -- the driver's calls -------------------------------------------------------------------
    def stop(self, lease_id: str, reason: str) -> None:
        self.dispatch(self.table.stop(lease_id, reason))

    def job_done(self, lease_id: str) -> None:
        self.dispatch(self.table.job_done(lease_id, time.monotonic()))

    def dispatch(self, actions: list[Go | Stop]) -> None:
        for action in actions:
            writer = self._conns.get(action.lease_id)
            if writer is None:
                continue  # not connected: a STOP reaches it at HELLO (the lease is cancelled)
            msg: Message = (GoMsg(action.positions, action.lease_id) if isinstance(action, Go)
                            else StopMsg(action.reason, action.lease_id))
            if isinstance(action, Go):
                log.debug("lease %s: go (%d partitions carried over)", action.lease_id,
                          sum(p is not None for p in action.positions.values()))
            with contextlib.suppress(Exception):
                writer.write(encode(msg))

    def place(self, line: HostLine, lease_id: str, work: bytes) -> bool:
        """Send a lease's work to a host (False: its connection is closing)."""
        return line.send(StartLease(lease_id, work))

    def stop_host(self, line: HostLine, reason: str) -> None:
        with contextlib.suppress(Exception):
            line.send(StopMsg(reason))

    # -- connections --------------------------------------------------------------------------
    async def _tick(self) -> None:
        """The table's clock, a scheduler job every ``tick_seconds``: what time alone decides."""
        self.dispatch(self.table.tick(time.monotonic()))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lease_id: str | None = None
        line: HostLine | None = None
        try:
            while raw := await reader.readline():
                msg = decode(raw)
                if not isinstance(msg, Hello | Ready | Report | Released | HostHello | HostStats | Ended) \
                        or msg.token != self.token:
                    log.warning("lease connection from %s: refused a message",
                                writer.get_extra_info("peername"))
                    break
                if line is not None:  # a host's connection: any of the leases placed on it
                    if not self._on_host_line(line, msg, writer):
                        break
                    continue
                if lease_id is None:
                    if isinstance(msg, HostHello):
                        line = self._accept_host(msg, writer)
                        if line is None:
                            break
                        continue
                    if not isinstance(msg, Hello) or not self._accept(msg.lease, writer):
                        break
                    lease_id = msg.lease
                    continue
                if isinstance(msg, Hello | HostHello | HostStats | Ended) or msg.lease != lease_id:
                    break
                self._handle(msg)
        except (LeaseWireError, ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            log.warning("lease %s: connection dropped: %s", lease_id or (line and line.host_id), exc)
        finally:
            if lease_id is not None:
                self._hung_up(lease_id, writer)
            if line is not None:
                for placed in list(line.leases):
                    self._hung_up(placed, writer)
                if self.on_host_gone is not None:
                    self.on_host_gone(line)
            writer.close()

    def _hung_up(self, lease_id: str, writer: asyncio.StreamWriter) -> None:
        if self._conns.get(lease_id) is writer:
            del self._conns[lease_id]
            self.dispatch(self.table.disconnected(lease_id, time.monotonic()))

    def _accept_host(self, msg: HostHello, writer: asyncio.StreamWriter) -> HostLine | None:
        line = HostLine(msg.host, msg.executor, writer, attempt=msg.attempt)
        if self.on_host is None or not self.on_host(line):
            log.info("mirror host %s: refused", msg.host)
            writer.write(encode(StopMsg("unknown or ended mirror host")))
            return None
        writer.write(encode(Ack()))
        return line

    def _on_host_line(self, line: HostLine, msg: Message, writer: asyncio.StreamWriter) -> bool:
        """One message on a host's connection; False to drop the connection."""
        if isinstance(msg, HostHello):
            return False
        if isinstance(msg, HostStats):
            if msg.host == line.host_id:
                line.stats = msg
        elif isinstance(msg, Hello):
            if self._accept(msg.lease, writer):
                line.leases.add(msg.lease)
        elif isinstance(msg, Ended):
            if msg.lease in line.leases:  # its process no longer writes: as a closed connection
                line.leases.discard(msg.lease)
                self._hung_up(msg.lease, writer)
            if self.on_ended is not None:
                self.on_ended(msg)
        elif isinstance(msg, Ready | Report | Released) and msg.lease in line.leases:
            self._handle(msg)
        return True

    def _accept(self, lease_id: str, writer: asyncio.StreamWriter) -> bool:
        """An attempt's HELLO, before it builds its task: ACK, or STOP at once (a second attempt of
        a lease that was granted or is connected, e.g. Spark re-running it: it must not write)."""
        actions = self.table.hello(lease_id, time.monotonic())
        refused = [a for a in actions if isinstance(a, Stop) and a.lease_id == lease_id]
        self.dispatch([a for a in actions if a not in refused])
        if refused:
            log.info("lease %s: refused an attempt: %s", lease_id, refused[0].reason)
            writer.write(encode(StopMsg(refused[0].reason, lease_id)))
            return False
        self._conns[lease_id] = writer
        writer.write(encode(Ack(lease_id)))
        return True

    def _handle(self, msg: Ready | Report | Released) -> None:
        now = time.monotonic()
        if isinstance(msg, Ready):
            self.dispatch(self.table.ready(msg.lease, now))
        elif isinstance(msg, Report):
            self.table.seen(msg.lease, now)
            lease = self.table.leases.get(msg.lease)
            if lease is not None and self.on_report is not None:
                self.on_report(lease, msg)
            writer = self._conns.get(msg.lease)
            if writer is not None:
                writer.write(encode(Ack(msg.lease)))
        else:
            self.dispatch(self.table.released(msg.lease, msg.positions, now))
