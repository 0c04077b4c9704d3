"""Ctrl-C on ``mm2py run`` against live clusters, at every moment of a run: a clean exit with the
documented status and no traceback each time, and a restart that mirrors everything exactly
once. (Against a silent cluster: tests/integration/test_unreachable.py.)"""

from __future__ import annotations

import contextlib
import signal
from collections import Counter
from pathlib import Path

import pytest

from mm2py.interrupts import FORCED_MESSAGE
from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import config_file, create_topic, read_all, total, unique
from tests.support.interrupted_run import LOADING, TIMED, CommandRun, assert_clean_stop, interrupt_at
from tests.support.live_producer import LiveProducer

pytestmark = pytest.mark.integration


def test_ctrl_c_at_every_moment_of_a_run_stops_cleanly_and_nothing_is_mirrored_twice(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path
) -> None:
    """Sources written to all along; ``mm2py run`` started again and again and interrupted.

    One flow (``east->west``) is interrupted at each milestone of a run in turn: while its modules
    load (130), during start-up, once its task runs, and during a catch-up of what was written
    while it was down (0: progress committed); then once with a second signal during the stop
    (forced: the message, 128 + the signal). Four more flows, each from its own alias of the same
    cluster, run at once and are interrupted 0.2, 1, 4 and 10 s after mm2py's code took over in
    them. A last run of all five mirrors the rest: each target holds its source's records, each
    once."""
    aliases = ["east", *(f"east{i}" for i in range(len(TIMED)))]
    topics = {alias: create_topic(east.bootstrap, unique("ctrl-c"), partitions=3) for alias in aliases}

    def args(*names: str) -> list[str]:
        path = config_file(tmp_path / f"{'-'.join(names)}.json",
                           {**{a: east.bootstrap for a in names}, "west": west.bootstrap},
                           {f"{a}->west": {"topics": topics[a]} for a in names})
        return ["run", "-c", str(path), "--commit-interval", "0.5"]

    with contextlib.ExitStack() as stack:
        live = {a: stack.enter_context(LiveProducer(east.bootstrap, topics[a], 3)) for a in aliases}
        mirrored = f"east.{topics['east']}"
        for n, (milestone, status) in enumerate([
            (LOADING, 130),  # nothing started: nothing to stop or commit
            ("mirroring:", 0),  # start-up: the flow's topics and tasks being set up
            ("now mirroring", 0),  # its task runs
            ("catch-up", 0),  # copying what was written while no worker ran
        ]):
            run = CommandRun(args("east"), tmp_path, f"run{n}")
            try:
                if milestone == "catch-up":
                    before = total(west.bootstrap, mirrored)
                    run.wait_for(lambda: total(west.bootstrap, mirrored) > before, every=0.05)  # noqa: B023
                else:
                    run.wait_for(milestone)
                run.interrupt()
                run.assert_clean(run.finish()[0], status)
                assert ("stopped" in run.out.read_text()) == (status == 0), run.text()
            finally:
                run.kill()
        # a second signal while the stop is under way: SIGINT and SIGTERM arrive together (the
        # process is held while they are sent); the one handled first starts the stop, the other
        # finds it under way and ends the process at once with its own status. Which comes first is
        # the kernel's and the threads' doing (a thread other than the main one may take either and
        # trip its flag while the main thread already runs the handlers): the stop's line names it
        run = CommandRun(args("east"), tmp_path, "forced")
        try:
            run.wait_for("now mirroring")
            run.proc.send_signal(signal.SIGSTOP)
            run.interrupt()
            run.proc.send_signal(signal.SIGTERM)
            run.proc.send_signal(signal.SIGCONT)
            status = run.finish()[0]
            first = "SIGTERM" if "mm2py: SIGTERM: stopping" in run.stderr() else "Ctrl-C"
            assert f"mm2py: {first}: stopping and committing progress" in run.stderr(), run.text()
            run.assert_clean(status, 128 + (signal.SIGINT if first == "SIGTERM" else signal.SIGTERM))
            assert FORCED_MESSAGE in run.stderr(), run.text()
        finally:
            run.kill()
        timed = [CommandRun(args(a), tmp_path, f"timed-{a}") for a in aliases[1:]]
        try:
            served = interrupt_at(list(zip(timed, TIMED, strict=True)))
            for run in timed:
                assert_clean_stop(run, served[run])
        finally:
            for run in timed:
                run.kill()
        produced = {a: producer.stop() for a, producer in live.items()}
    run = CommandRun(args(*aliases), tmp_path, "last")
    try:
        run.wait_for(lambda: all(total(west.bootstrap, f"{a}.{topics[a]}") >= produced[a] for a in aliases),
                     units=20, every=0.5)
        run.interrupt()
        run.assert_clean(run.finish()[0], 0)
    finally:
        run.kill()

    def content(bootstrap: str, name: str) -> Counter[tuple[object, ...]]:
        return Counter((r.partition, r.key, r.value) for r in read_all(bootstrap, name))

    for alias in aliases:
        source = content(east.bootstrap, topics[alias])
        assert sum(source.values()) == produced[alias]
        assert content(west.bootstrap, f"{alias}.{topics[alias]}") == source, alias  # each record once
