"""mm2py.interrupts, the command's Ctrl-C policy, in a child Python that stands for the command:
unwinding quietly while loading, a clean stop while serving, a second Ctrl-C that ends the process
at once and says so, and any Ctrl-C once the command returned. Every wait is sized from how long
the child took to print its first line."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mm2py.interrupts import FORCED_MESSAGE

#: a guard on the first wait only (nothing measured yet)
GUARD = 120.0

#: the child: a command that runs ``PHASE`` and prints what it reaches
CHILD = """
import sys, threading
from mm2py import interrupts

def forever():
    threading.Event().wait()

def command():
    phase = sys.argv[1]
    if phase == "loading":
        print("loading", flush=True)
        forever()
    if phase == "serving":  # a stop that never finishes: only a second Ctrl-C ends it
        with interrupts.stop_on_signals(lambda: print("stop asked", flush=True)):
            print("serving", flush=True)
            forever()
    if phase == "exiting":  # the command returned; a thread the interpreter waits for at exit
        threading.Thread(target=forever).start()
    return 0

status = interrupts.guarded(command)
print("returned", flush=True)
sys.exit(status)
"""


class Child:
    def __init__(self, tmp_path: Path, phase: str) -> None:
        self.out, self.err = tmp_path / "out", tmp_path / "err"
        self.spawned = time.monotonic()
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", CHILD, phase], stdout=out, stderr=err)
        self.unit: float | None = None

    def wait_for(self, line: str) -> None:
        timeout = GUARD if self.unit is None else 10 * self.unit
        deadline = time.monotonic() + timeout
        while line not in self.out.read_text().splitlines():
            assert self.proc.poll() is None, self.err.read_text()
            assert time.monotonic() < deadline, f"no {line!r} within {timeout:.1f}s"
            time.sleep(0.01)
        if self.unit is None:
            self.unit = time.monotonic() - self.spawned

    def finish(self) -> int:
        assert self.unit is not None
        try:
            return self.proc.wait(max(2.0, 4 * self.unit))
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.mark.cli_process
def test_ctrl_c_while_loading_unwinds_quietly_with_status_130(tmp_path: Path) -> None:
    child = Child(tmp_path, "loading")
    child.wait_for("loading")
    child.proc.send_signal(signal.SIGINT)
    assert child.finish() == 130
    assert child.err.read_text() == "mm2py: Ctrl-C: stopping (Ctrl-C again to exit at once)\n"


@pytest.mark.cli_process
def test_sigterm_while_loading_gives_143(tmp_path: Path) -> None:
    child = Child(tmp_path, "loading")
    child.wait_for("loading")
    child.proc.send_signal(signal.SIGTERM)
    assert child.finish() == 143
    assert child.err.read_text() == "mm2py: SIGTERM: stopping (Ctrl-C again to exit at once)\n"


@pytest.mark.cli_process
def test_a_second_ctrl_c_during_the_stop_ends_the_process_at_once_and_says_so(tmp_path: Path) -> None:
    child = Child(tmp_path, "serving")
    child.wait_for("serving")
    child.proc.send_signal(signal.SIGINT)
    child.wait_for("stop asked")  # the first asked for the clean stop and did not end the process
    assert child.proc.poll() is None
    assert "Ctrl-C again to exit at once" in child.err.read_text()
    child.proc.send_signal(signal.SIGINT)
    assert child.finish() == 130
    err = child.err.read_text()
    assert FORCED_MESSAGE in err and "Traceback" not in err, err


@pytest.mark.cli_process
def test_ctrl_c_after_the_command_returned_ends_the_process_at_once_with_its_status(tmp_path: Path) -> None:
    """The interpreter waits for a thread at exit: Ctrl-C ends the wait, with the command's own
    status (0 here) and no traceback from threading's shutdown."""
    child = Child(tmp_path, "exiting")
    child.wait_for("returned")
    child.proc.send_signal(signal.SIGINT)
    assert child.finish() == 0
    err = child.err.read_text()
    assert "interrupted while exiting" in err and "Traceback" not in err, err


def test_run_help_documents_how_it_stops_and_its_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    from mm2py.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Ctrl-C (SIGINT) or SIGTERM stops it cleanly at any moment" in text
    assert "exits 0" in text and "exits 130" in text and "A second Ctrl-C" in text


def test_main_called_in_a_process_of_its_own_leaves_the_callers_signal_handlers_as_they_were(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``mm2py.cli.main`` called by a program (a test here) applies the policy while it runs only."""
    from mm2py.cli import main

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(SystemExit):  # (not `run`: it sets up this process's logging)
        main(["run", "--help"])
    assert {sig: signal.getsignal(sig) for sig in before} == before
    assert "Ctrl-C" in capsys.readouterr().out


def test_the_mm2py_script_and_python_dash_m_mm2py_enter_through_the_policy() -> None:
    """The installed ``mm2py`` script and ``python -m mm2py`` start at :mod:`mm2py.command`, which
    installs the policy before the CLI's modules load (the tests interrupt ``python -m mm2py``)."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"mm2py": "mm2py.command:main"}
    assert "from mm2py.command import main" in (root / "mm2py" / "__main__.py").read_text()


#: a command whose Ctrl-C came while an ``exec`` of a string ran (as ``dataclasses`` runs one for
#: most classes it makes while modules load) and was caught further up (as mm2py.cli.main does)
CAUGHT_IN_EXEC = """
import signal, sys
from mm2py import interrupts

def command():
    try:
        exec("import signal; signal.raise_signal(signal.SIGINT)")
    except KeyboardInterrupt:
        return interrupts.interrupted_status() if sys.argv[1] == "unwound" else 0
    return 1

raise SystemExit(interrupts.leave(interrupts.guarded(command)))
"""


@pytest.mark.parametrize(("how", "status"), [("unwound", 130), ("stopped", 0)])
def test_a_ctrl_c_caught_after_an_exec_ends_with_the_commands_status_not_by_sigint(
        how: str, status: int, tmp_path: Path) -> None:
    """CPython 3.11 marks a KeyboardInterrupt that left an ``exec`` as unhandled even when it was
    caught, and would end the process by SIGINT (-2) at exit: the entry ends it with the command's
    own status instead (3 of 12 Ctrl-Cs 0.1-0.3 s into ``mm2py run``'s loading ended with -2)."""
    (tmp_path / "caught_in_exec.py").write_text(CAUGHT_IN_EXEC)  # run as the entry runs: python -m
    done = subprocess.run([sys.executable, "-m", "caught_in_exec", how], capture_output=True, text=True,
                          timeout=GUARD, cwd=tmp_path)
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
