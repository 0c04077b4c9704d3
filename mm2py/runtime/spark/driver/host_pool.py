"""The driver's mirror hosts: one long-lived Spark job per executor, where leases are placed.

A host (``executor/host.py``) is one Spark task that runs every lease the driver places on it in
one process, on one event loop and on one set of clients per flow. :class:`HostPool` keeps as many
hosts as Spark has executors (``wanted``; ``local[N]`` has one), submits a host's Spark job when
one is missing (after a back-off when hosts keep failing), knows which leases are placed on which
host, and picks a host for a new lease:

- **PLACE_LIGHTEST**: a lease goes to the connected host carrying the fewest partitions, counting
  neither the lease it succeeds nor its own; between equals, the host of the lease it succeeds
  (a renewal stays where it is, so its hand-over happens inside one process: no Spark job, no new
  process, no new fetch session), then the oldest. A running lease for which another host is
  strictly lighter moves there at once (the scheduler starts its successor there).
- **HOST_LOST**: a host whose Spark job ended, or whose connection closed, takes no more leases;
  each lease on it that did not say ENDED is reported lost once (``on_lost``: its task fails and
  is leased again from its committed progress; the lease table fences it first).
- **SPARK_GAVE_UP**: a host whose connection closed while its Spark job still runs (Spark lost its
  executor and will run the task again elsewhere: the job does not end) is asked after, at most
  every ``GAVE_UP_POLL_S``: once Spark counts more failed attempts of the host's task
  (``failed_attempts``) than the attempt number the host said HOST_HELLO with, that attempt
  failed, and its leases are reported lost as if the job had ended. Spark has given up on the
  process and its connection is closed: FENCING lets the partitions go at once, not two fence
  intervals after the host was last heard (a killed worker's partitions mirror again within
  seconds). Attempts before it failed before it started, so they never count for it. The count
  must hold for ``GAVE_UP_CONFIRM_S`` with the job still running (``failed_attempts`` says 0 once
  the job ended): a failure Spark counts against the task (a Python worker that crashed, on
  ``local[N]``) ends the job at once, and its error, which names the cause, is what the leases'
  tasks report.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mm2py.retry import Backoff
from mm2py.runtime.host_figures import HostFigures
from mm2py.runtime.spark.driver.lease_coordinator import HostLine, LeaseCoordinator
from mm2py.runtime.spark.driver.session import job_error
from mm2py.runtime.spark.executor.host import HostResult, HostWork
from mm2py.runtime.spark.executor.lease import LeaseWork
from mm2py.runtime.spark.lease_messages import HostStats

log = logging.getLogger(__name__)

__all__ = ["HostPool", "MirrorHost"]

#: a mirror host that ended is replaced 0.5 s later, doubling with each such end up to 30 s
#: (``delay`` only)
HOST_RESUBMIT_BACKOFF = Backoff(0.5, 30.0)
#: SPARK_GAVE_UP: how often a hung-up host's Spark attempt is asked after (a call into the JVM)
GAVE_UP_POLL_S = 0.25
#: SPARK_GAVE_UP: how long Spark must count the host's attempt failed, its job still running
GAVE_UP_CONFIRM_S = 1.0


@dataclass(eq=False)
class MirrorHost:
    host_id: str
    submitted: float
    line: HostLine | None = None  # once it said HOST_HELLO, until its connection closes
    #: lease id -> its partition count: placed here and not ended (no ENDED, not lost)
    leases: dict[str, int] = field(default_factory=dict)
    ended: bool = False  # its Spark job returned or failed
    hung_up: bool = False  # its connection closed
    job: asyncio.Task[None] | None = None
    asked: float = 0.0  # SPARK_GAVE_UP: when Spark was last asked about its attempt (driver clock)
    failed_since: float | None = None  # SPARK_GAVE_UP: since when Spark counts its attempt failed

    @property
    def live(self) -> bool:
        """May still take leases: not ended, connection not closed (connected or starting)."""
        return not self.ended and not self.hung_up

    @property
    def load(self) -> int:
        return sum(self.leases.values())


class HostPool:
    def __init__(
        self, coordinator: LeaseCoordinator, collect: Callable[[HostWork], HostResult],
        pool: concurrent.futures.ThreadPoolExecutor, wanted: Callable[[], int],
        on_lost: Callable[[str, str], None],
        failed_attempts: Callable[[str], int] = lambda host_id: 0,
    ) -> None:
        self.coordinator = coordinator
        self.collect = collect  # runs one host as a Spark job (blocking until the host stops)
        self.pool = pool
        self.wanted = wanted  # how many hosts there should be (one per executor)
        self.on_lost = on_lost  # (lease id, why): a lease whose host went away without its ENDED
        #: host id -> how many attempts of its Spark task failed so far (SPARK_GAVE_UP)
        self.failed_attempts = failed_attempts
        self.hosts: dict[str, MirrorHost] = {}
        self._ids = itertools.count()
        self.failures = 0  # host jobs that ended while the pool wanted them: paces resubmission
        self._next_submit = 0.0
        self.started = 0
        coordinator.on_host = self._hello
        coordinator.on_host_gone = self._gone

    # -- keeping hosts ------------------------------------------------------------------------
    def keep(self, now: float) -> None:
        """Submit a host's Spark job for each one missing (paced after failures); report the
        leases of hosts Spark gave up on (SPARK_GAVE_UP)."""
        for host in self.hosts.values():
            if host.hung_up and not host.ended and host.leases and now - host.asked >= GAVE_UP_POLL_S:
                self._ask_spark(host, now)
        live = [h for h in self.hosts.values() if h.live]
        missing = self.wanted() - len(live)
        if missing <= 0 or now < self._next_submit:
            return
        for _ in range(missing):
            host = MirrorHost(f"host-{next(self._ids)}", now)
            self.hosts[host.host_id] = host
            self.started += 1
            work = HostWork(host.host_id, self.coordinator.address, self.coordinator.token)
            host.job = asyncio.create_task(self._job(host, work))
        for host_id in [k for k, h in self.hosts.items() if not h.live and not h.leases and h.job is None]:
            del self.hosts[host_id]

    async def _job(self, host: MirrorHost, work: HostWork) -> None:
        loop = asyncio.get_running_loop()
        why = "its Spark job ended"
        try:
            result = await loop.run_in_executor(self.pool, self.collect, work)
            why = f"it stopped ({result.error or result.reason or 'no reason given'})"
        except Exception as exc:
            why = f"its Spark job failed: {job_error(exc)}"
        finally:
            host.ended, host.job = True, None
            self._lose_leases(host, why)
        if not self._stopping:
            self.failures += 1
            self._next_submit = time.monotonic() + HOST_RESUBMIT_BACKOFF.delay(self.failures - 1)
            log.warning("mirror host %s (%s) ended: %s; another takes its place", host.host_id,
                        host.line.executor if host.line else "never connected", why)

    def _ask_spark(self, host: MirrorHost, now: float) -> None:
        """SPARK_GAVE_UP for a hung-up host with leases: its leases are lost once Spark has counted
        its attempt failed for ``GAVE_UP_CONFIRM_S``, the job running on."""
        if host.line is None:  # never said HOST_HELLO: no attempt to ask about
            return
        host.asked = now
        if self.failed_attempts(host.host_id) <= host.line.attempt:
            host.failed_since = None
        elif host.failed_since is None:
            host.failed_since = now
        elif now - host.failed_since >= GAVE_UP_CONFIRM_S:
            self._lose_leases(host, "Spark lost its executor (its attempt failed, its job runs on)")

    _stopping = False

    def _hello(self, line: HostLine) -> bool:
        host = self.hosts.get(line.host_id)
        if host is None or not host.live or host.line is not None:
            return False
        host.line = line
        self.failures = 0
        log.info("mirror host %s running on %s", host.host_id, line.executor)
        return True

    def _gone(self, line: HostLine) -> None:
        host = self.hosts.get(line.host_id)
        if host is not None and host.line is line:
            host.hung_up = True  # HOST_LOST: its leases end with it (the table fences them)

    def _lose_leases(self, host: MirrorHost, why: str) -> None:
        for lease_id in list(host.leases):
            del host.leases[lease_id]
            self.on_lost(lease_id, f"its mirror host {host.host_id} was lost: {why}")

    # -- placing leases -----------------------------------------------------------------------
    def host_of(self, lease_id: str) -> MirrorHost | None:
        return next((h for h in self.hosts.values() if lease_id in h.leases), None)

    def pick(self, succeeds: str | None = None) -> MirrorHost | None:
        """PLACE_LIGHTEST: the host for a new lease (None: no host connected yet)."""
        ready = [h for h in self.hosts.values() if h.live and h.line is not None]
        if not ready:
            return None
        current = self.host_of(succeeds) if succeeds is not None else None

        def load(h: MirrorHost) -> int:
            return h.load - (h.leases.get(succeeds, 0) if succeeds is not None else 0)

        return min(ready, key=lambda h: (load(h), h is not current, h.submitted))

    def place(self, host: MirrorHost, work: LeaseWork) -> bool:
        """Send ``work`` to ``host``; False if its connection is closing."""
        assert host.line is not None
        if not self.coordinator.place(host.line, work.lease_id, pickle.dumps(work)):
            return False
        host.leases[work.lease_id] = len(work.spec.partitions)
        return True

    def ended(self, lease_id: str) -> bool:
        """A lease said ENDED: True if it was placed here and not already reported lost."""
        host = self.host_of(lease_id)
        if host is None:
            return False
        del host.leases[lease_id]
        return True

    def placed(self) -> int:
        return sum(len(h.leases) for h in self.hosts.values())

    def placed_ids(self) -> list[str]:
        """The leases placed on hosts that have not ended (not ENDED, not lost)."""
        return [lease_id for h in self.hosts.values() for lease_id in h.leases]

    def running(self) -> int:
        return sum(h.live and h.line is not None for h in self.hosts.values())

    def figures(self) -> list[HostFigures]:
        """The connected hosts' figures, from their last HOST_STATS (zeros until the first)."""
        out = []
        for h in self.hosts.values():
            if h.live and h.line is not None:
                s = h.line.stats or HostStats(h.host_id, "")
                out.append(HostFigures(h.host_id, h.line.executor, len(h.leases), h.load,
                                       dict(s.requests), s.cpu_seconds, s.rss_bytes))
        return out

    # -- stopping -----------------------------------------------------------------------------
    async def stop(self, timeout: float) -> None:
        """Stop every host (their leases were stopped first) and wait for their jobs."""
        self._stopping = True
        for host in self.hosts.values():
            if host.line is not None:
                self.coordinator.stop_host(host.line, "the worker stops")
        jobs = [h.job for h in self.hosts.values() if h.job is not None]
        if jobs:
            _done, pending = await asyncio.wait(jobs, timeout=timeout)
            if pending:
                log.warning("%d mirror hosts did not end within %.0fs of the stop", len(pending), timeout)

    def abandon(self) -> None:
        self._stopping = True
        for host in self.hosts.values():
            if host.job is not None:
                with contextlib.suppress(Exception):
                    host.job.cancel()
