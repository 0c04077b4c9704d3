"""Named periodic jobs on the event loop, in the spirit of MirrorMaker 2's ``Scheduler``.

Every periodic piece of work a worker does — the controller's topic refresh, heartbeats, the
checkpoint connector's jobs, the topic ACL sync, the status lines, the Spark driver's lease step
and lease clock, a flow's delayed start — is a named job of a :class:`Scheduler`. Its jobs
run one after another (never two of one scheduler at once, so jobs may share data), each again
``interval`` seconds after its previous run *ended*. Each run is logged with its duration at debug
level; a failure is logged at warning level with the owner and the job's name and does not stop
the loop: the job simply runs again after its retry delay (which may grow with each failure in a
row: ``backoff``). Setting the stop event ends the loop
as soon as the job under way (if any) has finished; cancel the task running :meth:`Scheduler.run`
to abandon that job as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from mm2py import interrupts

__all__ = ["Job", "Scheduler", "sleep_or_stop"]

log = logging.getLogger(__name__)

#: a job: called for each run, awaited until that run is over
Job = Callable[[], Awaitable[object]]


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds``, or less if ``stop`` is set meanwhile; True if ``stop`` is set."""
    if not stop.is_set() and seconds > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


@dataclass
class _Entry:
    name: str
    job: Job
    interval: float | None  # None: a one-off job, run until it succeeded once
    retry: float  # delay after a failed run
    due: float
    backoff: float = 1.0  # the retry delay grows by this factor with each failure in a row ...
    max_retry: float | None = None  # ... up to this
    quiet: bool = False  # runs not logged (a job run several times a second); failures still are
    runs: int = 0
    failures: int = 0
    streak: int = 0  # failed runs since the last that succeeded

    def retry_delay(self) -> float:
        """The delay after the latest failed run: ``retry``, times ``backoff`` for each earlier
        failure in a row, at most ``max_retry``."""
        delay = self.retry * self.backoff ** max(0, self.streak - 1)
        return delay if self.max_retry is None else min(self.max_retry, delay)


class Scheduler:
    """Named jobs of one ``owner`` (a flow's name, say), run until ``stop`` is set.

    ``on_failure(job_name, exc)`` is called for every failed run (for the owner's counters),
    after the failure was logged.
    """

    def __init__(
        self,
        owner: str,
        stop: asyncio.Event,
        *,
        on_failure: Callable[[str, Exception], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.owner = owner
        self.stop = stop
        self.on_failure = on_failure
        self.clock = clock
        self._jobs: list[_Entry] = []

    # -- what to run -------------------------------------------------------------------------------
    def every(
        self, name: str, interval: float, job: Job, *, delay: float = 0.0, retry: float | None = None,
        quiet: bool = False,
    ) -> None:
        """Run ``job`` after ``delay`` seconds, then ``interval`` seconds after each run ended
        (``retry`` seconds after a failed one; by default also ``interval``). ``quiet``: its runs
        are not logged (for a job run several times a second); its failures are."""
        if interval <= 0:
            raise ValueError(f"{self.owner}: job {name!r} needs a positive interval, not {interval}")
        self._add(_Entry(name, job, interval, interval if retry is None else retry, self.clock() + delay,
                         quiet=quiet))

    def once(
        self, name: str, job: Job, *, retry: float, delay: float = 0.0, backoff: float = 1.0,
        max_retry: float | None = None,
    ) -> None:
        """Run ``job`` after ``delay`` seconds, and again until it succeeds: ``retry`` seconds
        after a failed run, ``backoff`` times longer after each further failure in a row (at most
        ``max_retry`` seconds)."""
        self._add(_Entry(name, job, None, retry, self.clock() + delay, backoff=backoff, max_retry=max_retry))

    def cancel(self, name: str) -> None:
        """Drop the job ``name`` (a job may drop itself: it is not run again)."""
        self._jobs = [e for e in self._jobs if e.name != name]

    def _add(self, entry: _Entry) -> None:
        if any(e.name == entry.name for e in self._jobs):
            raise ValueError(f"{self.owner}: there is a job called {entry.name!r} already")
        if entry.retry <= 0:
            raise ValueError(f"{self.owner}: job {entry.name!r} needs a positive retry delay")
        if entry.backoff < 1 or (entry.max_retry is not None and entry.max_retry < entry.retry):
            raise ValueError(f"{self.owner}: job {entry.name!r} needs a back-off of at least 1 and a "
                             "longest retry delay no shorter than the first")
        self._jobs.append(entry)

    @property
    def jobs(self) -> list[str]:
        """The names of the jobs still scheduled (a one-off job leaves once it succeeded)."""
        return [e.name for e in self._jobs]

    def stats(self, name: str) -> tuple[int, int]:
        """(runs, failed runs) of the job ``name`` so far."""
        entry = next(e for e in self._jobs if e.name == name)
        return entry.runs, entry.failures

    # -- running -----------------------------------------------------------------------------------
    async def execute(self, name: str, job: Job, *, quiet: bool = False) -> bool:
        """Run ``job`` once now, logging its duration (unless ``quiet``), or its failure; True if
        it succeeded."""
        started = self.clock()
        try:
            await job()
        except Exception as exc:
            # owner and job as one first argument: runtime.log_throttle holds repeats back per job;
            # once Ctrl-C or SIGTERM came, a failure is the stop cutting the job short: no warning
            level = logging.INFO if interrupts.requested() else logging.WARNING
            log.log(level, "%s failed after %.3f s: %s: %s", f"{self.owner}: {name}", self.clock() - started,
                    type(exc).__name__, exc)
            log.debug("%s: %s failed", self.owner, name, exc_info=True)
            if self.on_failure is not None:
                self.on_failure(name, exc)
            return False
        if not quiet:
            log.debug("%s: %s took %.3f s", self.owner, name, self.clock() - started)
        return True

    async def until_done(self, name: str, job: Job, *, retry: float) -> bool:
        """Run ``job`` now and every ``retry`` seconds until it succeeds; False if stopped first."""
        while not self.stop.is_set():
            if await self.execute(name, job):
                return True
            await sleep_or_stop(self.stop, retry)
        return False

    async def run_due(self) -> float | None:
        """Run every job that is due, in the order they were added; returns the seconds until the
        next one is due (None when no job is left)."""
        for entry in list(self._jobs):
            if self.stop.is_set():
                break
            if entry.due > self.clock() or not self._scheduled(entry):
                continue
            ok = await self.execute(entry.name, entry.job, quiet=entry.quiet)
            entry.runs += 1
            if not ok:
                entry.failures += 1
            entry.streak = 0 if ok else entry.streak + 1
            if not self._scheduled(entry):
                continue  # the job was dropped while it ran (cancel)
            if ok and entry.interval is None:
                self._jobs.remove(entry)
                continue
            pause = entry.interval if ok and entry.interval is not None else entry.retry_delay()
            entry.due = self.clock() + pause
        if not self._jobs:
            return None
        return max(0.0, min(e.due for e in self._jobs) - self.clock())

    def _scheduled(self, entry: _Entry) -> bool:
        return any(e is entry for e in self._jobs)

    async def run(self) -> None:
        """Run the jobs until ``stop`` is set (or no job is left)."""
        while not self.stop.is_set():
            wait = await self.run_due()
            if wait is None or await sleep_or_stop(self.stop, wait):
                return
