"""``mm2py`` in a child process that a test interrupts at a chosen moment: right after mm2py's code
took over (its modules still loading), after a line it printed, or when a condition holds.

The child runs under ``python -X importtime``, which writes a line to stderr as each module
finishes importing: ``mm2py.cli``'s line shows that the command's entry (``mm2py.command``) has
installed the Ctrl-C policy and the heavy imports are starting, a moment no output of mm2py's
own marks. Every wait but the first is sized from what the run measured: :attr:`CommandRun.unit`
is how long the child took to print its first line (mostly imports: a measure of how fast this
machine is right now), or to reach mm2py's code when it was interrupted before printing any.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: a guard on the very first wait only (nothing is measured yet); pytest's own timeout is longer
FIRST_LINE_GUARD = 240.0
#: the importtime line of the command's first mm2py module after the Ctrl-C policy is installed
LOADING = "loading"
#: the moments of issue 48's Ctrl-C check: seconds after mm2py's code took over (on a quiet
#: machine: its modules loading, start-up, its flows set up, mirroring)
TIMED = (0.2, 1.0, 4.0, 10.0)
_LOADING_LINE = re.compile(r"^import time:.*\|\s*mm2py\.cli$", re.MULTILINE)


class CommandRun:
    """``python -m mm2py ARGS`` (the ``mm2py`` command), stdout and stderr each in a file."""

    def __init__(self, args: list[str], folder: Path, name: str) -> None:
        self.out, self.err = folder / f"{name}.out", folder / f"{name}.err"
        self.spawned = time.monotonic()
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-X", "importtime", "-m", "mm2py", *args], stdout=out, stderr=err,
                stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        #: seconds from spawn until mm2py's code ran, and until the command printed its first line
        self.loaded: float | None = None
        self.first_line: float | None = None
        self.interrupted: float | None = None

    @property
    def unit(self) -> float:
        """How long this run took to print its first line (to reach mm2py's code, before that)."""
        unit = self.first_line or self.loaded
        assert unit is not None, "nothing measured yet: wait_for() first"
        return unit

    def stderr(self) -> str:
        """What the command wrote to stderr (importtime's lines left out)."""
        return "\n".join(line for line in self.err.read_text().splitlines()
                         if not line.startswith("import time:"))

    def text(self) -> str:
        return self.out.read_text() + self.stderr()

    def _reached(self, milestone: str) -> bool:
        if milestone == LOADING:
            return _LOADING_LINE.search(self.err.read_text()) is not None
        return milestone in self.text()

    def seen_loading(self) -> bool:
        """Whether mm2py's code runs yet (measuring :attr:`loaded` the first time it does)."""
        if self.loaded is None and self._reached(LOADING):
            self.loaded = time.monotonic() - self.spawned
        return self.loaded is not None

    def wait_for(self, milestone: str | Callable[[], bool], units: float = 10.0, plus: float = 0.0,
                 every: float = 0.01) -> float:
        """Wait until ``milestone`` (:data:`LOADING`, a text the command printed, or a condition
        looked at ``every`` seconds) holds, for at most ``units`` times :attr:`unit` once the first
        line came (and ``plus`` seconds: a period the command was configured to wait); the seconds
        since spawn."""
        if self.loaded is None:
            self._wait(self.seen_loading, FIRST_LINE_GUARD, "mm2py's code to run")
        assert self.loaded is not None
        if milestone == LOADING:
            return self.loaded
        if self.first_line is None:
            self._wait(lambda: bool(self.out.read_text().strip()), FIRST_LINE_GUARD, "a first line")
            self.first_line = time.monotonic() - self.spawned
        if callable(milestone):
            self._wait(milestone, units * self.unit + plus, "the condition", every)
        else:
            self._wait(lambda: self._reached(milestone), units * self.unit + plus, repr(milestone))
        return time.monotonic() - self.spawned

    def _wait(self, reached: Callable[[], bool], timeout: float, what: str, every: float = 0.01) -> None:
        deadline = time.monotonic() + timeout
        while not reached():
            if self.proc.poll() is not None:
                raise AssertionError(f"mm2py exited ({self.proc.returncode}) before {what}:\n{self.text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:.1f}s:\n{self.text()}")
            time.sleep(every)

    def interrupt(self, sig: int = signal.SIGINT) -> None:
        self.interrupted = time.monotonic()
        self.proc.send_signal(sig)

    def finish(self, units: float = 4.0, floor: float = 5.0) -> tuple[int, float]:
        """The exit status and how long after the interrupt it came; the process must end within
        ``units`` times :attr:`unit` (at least ``floor`` seconds: a fast machine's stop still talks
        to the clusters)."""
        timeout = max(floor, units * self.unit)
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"mm2py still running {timeout:.1f}s after the interrupt:\n{self.text()}") from None
        return status, time.monotonic() - (self.interrupted or self.spawned)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def assert_clean(self, status: int, expected: int) -> None:
        """Exit ``expected``, and no traceback on stderr."""
        assert status == expected, f"exit {status}, expected {expected}:\n{self.text()}"
        assert "Traceback" not in self.stderr(), self.stderr()


def interrupt_at(runs: Sequence[tuple[CommandRun, float]]) -> dict[CommandRun, bool]:
    """Interrupt each of ``runs`` (started together) its ``seconds`` after mm2py's code took over
    in it; for each, whether it had printed its first line by then (its worker was set up)."""
    pending, served = dict(runs), {}
    guard = time.monotonic() + FIRST_LINE_GUARD + max(pending.values())
    while pending:
        for run, seconds in list(pending.items()):
            if run.proc.poll() is not None:
                raise AssertionError(f"mm2py exited ({run.proc.returncode}) early:\n{run.text()}")
            if run.seen_loading() and time.monotonic() - run.spawned >= (run.loaded or 0) + seconds:
                served[run] = bool(run.out.read_text().strip())
                run.interrupt()
                del pending[run]
        assert time.monotonic() < guard, "mm2py's code never ran"
        time.sleep(0.005)
    return served


def assert_clean_stop(run: CommandRun, served: bool) -> None:
    """A run interrupted after its worker was set up stops cleanly (0, ``stopped ...`` printed);
    one interrupted before may also have been unwinding still (130, nothing printed); no traceback."""
    status, _ = run.finish()
    stopped = "stopped" in run.out.read_text()
    if served or status == 0:
        run.assert_clean(status, 0)
        assert stopped, run.text()
    else:
        run.assert_clean(status, 130)
        assert not stopped, run.text()
