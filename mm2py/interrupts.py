"""Ctrl-C (SIGINT) and SIGTERM for the ``mm2py`` command: a clean stop at any moment, and a second
one that forces the exit at once.

The policy, by phase of the process:

* **Loading** (imports, parsing, reading the configuration; any command that runs no worker):
  nothing has started, so there is nothing to stop. The signal becomes a ``KeyboardInterrupt``
  that unwinds the command, and :func:`guarded` turns it into exit status 128 + the signal's
  number (130 for Ctrl-C, 143 for SIGTERM) with no traceback. Admin calls waiting on a cluster
  give up (:func:`requested`); another call still waiting in a thread holds the exit up until its
  time-out, unless a second signal comes.
* **Serving** (``mm2py run`` once its event loop is up, :func:`stop_on_signals`): the signal asks
  the worker to stop cleanly (every task commits its position); the command then exits 0.
* **A second signal**, in any phase after the first (the stop is still under way, or the
  unwinding is slow): the process says so on stderr and ends at once (``os._exit``) with status
  128 + the signal's number. Positions since the last commit are then not committed.
* **The end**, once any signal was handled: the process ends at once with the command's status
  (:func:`leave`), never by the interpreter's exit, which CPython 3.11 may turn into death by SIGINT.
* **Any signal once the command has returned** (the interpreter joining threads at exit): the
  process ends at once with the command's own status, saying so.

Only the main thread runs Python's signal handlers; the handler does nothing but count, write to
stderr with ``os.write``, flush the command's output before a forced exit, and call what was
registered (``loop.call_soon_threadsafe``, which the standard library's own ``asyncio.Runner``
also calls from a signal handler). This module imports
nothing of mm2py, so the command's entry (:mod:`mm2py.command`) installs it before any heavy import.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import NoReturn

__all__ = ["FORCED_MESSAGE", "guarded", "handling", "install", "interrupted_status", "leave", "requested",
           "stop_on_signals"]

#: the signals the command handles (both ask for the same stop)
SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: written to stderr when a second signal ends the process at once
FORCED_MESSAGE = "mm2py: interrupted again: exiting now, without finishing the stop"


class _State:
    """What the handler knows: how many signals came, which was last, what a first one stops."""

    def __init__(self) -> None:
        self.installed = False
        self.signals = 0
        self.last: int | None = None
        #: the clean stop of the phase under way (None: nothing to stop, unwind instead)
        self.stopper: Callable[[], object] | None = None
        #: the command returned: any signal now ends the process at once, with this status
        self.exiting = False
        self.exit_status: int | None = None
        #: a signal unwound the command (guarded() caught its KeyboardInterrupt)
        self.unwound = False


_state = _State()


def _write(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, (text + "\n").encode())


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    _state.signals += 1
    _state.last = signum
    if _state.exiting:  # the command is over (threads being joined): its status, at once
        status = _state.exit_status
        _exit("mm2py: interrupted while exiting: exiting now", 128 + signum if status is None else status)
    if _state.signals > 1:
        _exit(FORCED_MESSAGE, 128 + signum)
    stopper = _state.stopper
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    if stopper is None:
        # nothing to commit: unwind (guarded() gives 128 + signum); a call still waiting on a
        # cluster in a thread (up to its time-out) holds the unwinding up, a second signal does not
        _write(f"mm2py: {name}: stopping (Ctrl-C again to exit at once)")
        raise KeyboardInterrupt
    _write(f"mm2py: {name}: stopping and committing progress (Ctrl-C again to exit at once)")
    stopper()


def _exit(message: str, status: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):  # what the command printed (a reentrant flush: skipped)
        with contextlib.suppress(Exception):
            stream.flush()
    _write(message)
    os._exit(status)


def install() -> None:
    """Handle SIGINT and SIGTERM by this module's policy, from now on (the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        signal.signal(sig, _on_signal)
    _state.installed = True


def requested() -> bool:
    """A signal asked the command to stop (a plain read: any thread may ask, e.g. an admin call
    waiting for a cluster, which then gives up instead of holding the exit up)."""
    return _state.signals > 0


def interrupted_status() -> int:
    """The exit status of a command a signal unwound: 128 + its number (130 for Ctrl-C)."""
    return 128 + (_state.last if _state.last is not None else signal.SIGINT)


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """This module's policy while the block runs: installed for the block when no entry installed
    it for the process (a caller of :func:`mm2py.cli.main` in its own process), then the previous
    handlers back."""
    if _state.installed or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    install()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _state.installed = False
        _state.signals, _state.last, _state.stopper = 0, None, None


@contextlib.contextmanager
def stop_on_signals(stopper: Callable[[], object]) -> Iterator[None]:
    """While the block runs, a first signal calls ``stopper`` (from the signal handler: it must
    only hand the stop over, e.g. ``loop.call_soon_threadsafe``) instead of unwinding. A signal
    that came before the block and did not unwind the command (something caught its
    ``KeyboardInterrupt``) calls it at once."""
    _state.stopper = stopper
    if _state.signals:
        stopper()
    try:
        yield
    finally:
        _state.stopper = None


def guarded(command: Callable[[], int]) -> int:
    """Run ``command`` under this policy (installed first); its exit status, or 128 + the signal's
    number when a signal unwound it. From then on any signal ends the process at once: the
    interpreter may still be joining threads."""
    install()
    status: int | None = None
    try:
        try:
            status = command()
        finally:
            _state.exiting, _state.exit_status = True, status
    except KeyboardInterrupt:  # the signal unwound the command (or came just before the line above)
        status = _state.exit_status = interrupted_status()
        _state.unwound = True
    return status


def leave(status: int) -> int:
    """The entry's last step: ``status``, or, once any signal was handled, the end of the process at
    once with it (output and logging flushed).

    Why not the interpreter's own exit: CPython 3.11 remembers a ``KeyboardInterrupt`` that left any
    ``exec`` of a string (``dataclasses`` builds every dataclass's methods that way, so most
    imports run one) as "unhandled", even when it was caught further up, and then ends the process
    by SIGINT (status -2) instead of with the status the command returned. A Ctrl-C while the
    command's modules load lands there often (3 of 12 interrupts 0.1-0.3 s into the loading on
    this machine); so does one a library caught before a clean stop. And a thread still waiting on
    a cluster would hold the exit up: whatever the command was doing was stopped already."""
    if _state.signals or _state.unwound:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        logging = sys.modules.get("logging")
        if logging is not None:
            with contextlib.suppress(Exception):
                logging.shutdown()
        os._exit(status)
    return status
