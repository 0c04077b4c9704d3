"""Ctrl-C on ``mm2py run`` against live clusters, at every moment of a run: a clean exit with the
documented status and no traceback each time, and a restart that mirrors everything exactly
once. (Against a silent cluster: tests/integration/test_unreachable.py.)"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from mm2py.interrupts import FORCED_MESSAGE
from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import config_file, create_topic, read_all, total, unique
from tests.support.interrupted_run import LOADING, CommandRun
from tests.support.live_producer import LiveProducer

pytestmark = pytest.mark.integration


def test_ctrl_c_at_every_moment_of_a_run_stops_cleanly_and_nothing_is_mirrored_twice(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path
) -> None:
    """One flow, its source written to all along; ``mm2py run`` started again and again and
    interrupted: while its modules load (130), during start-up, once its task runs, and during a
    catch-up of what was written while it was down (0: progress committed), then once with a
    second signal during the stop (forced: the message, 128 + the signal). A last run mirrors the
    rest: the target holds the source's records, each once."""
    topic = create_topic(east.bootstrap, unique("ctrl-c"), partitions=3)
    mirrored = f"east.{topic}"
    config = tmp_path / "mm2.json"
    config_file(config, {"east": east.bootstrap, "west": west.bootstrap}, {"east->west": {"topics": topic}})
    args = ["run", "-c", str(config), "--commit-interval", "0.5"]
    with LiveProducer(east.bootstrap, topic, 3) as live:
        for n, (milestone, status) in enumerate([
            (LOADING, 130),  # nothing started: nothing to stop or commit
            ("mirroring:", 0),  # start-up: the flow's topics and tasks being set up
            ("now mirroring", 0),  # its task runs
            ("catch-up", 0),  # copying what was written while no worker ran
        ]):
            run = CommandRun(args, tmp_path, f"run{n}")
            try:
                if milestone == "catch-up":
                    before = total(west.bootstrap, mirrored)
                    run.wait_for(lambda: total(west.bootstrap, mirrored) > before)  # noqa: B023
                else:
                    run.wait_for(milestone)
                run.interrupt()
                run.assert_clean(run.finish()[0], status)
                if status == 0:
                    assert "stopped" in run.out.read_text(), run.text()
            finally:
                run.kill()
        # a second signal while the stop is under way: SIGINT and SIGTERM arrive together (the
        # process is held while they are sent), SIGINT is handled first and starts the stop, SIGTERM
        # finds it under way and ends the process at once
        run = CommandRun(args, tmp_path, "forced")
        try:
            run.wait_for("now mirroring")
            run.proc.send_signal(signal.SIGSTOP)
            run.interrupt()
            run.proc.send_signal(signal.SIGTERM)
            run.proc.send_signal(signal.SIGCONT)
            run.assert_clean(run.finish()[0], 128 + signal.SIGTERM)
            assert FORCED_MESSAGE in run.stderr(), run.text()
        finally:
            run.kill()
        produced = live.stop()
    run = CommandRun(args, tmp_path, "last")
    try:
        run.wait_for(lambda: total(west.bootstrap, mirrored) >= produced, units=20)
        run.interrupt()
        run.assert_clean(run.finish()[0], 0)
    finally:
        run.kill()

    def content(bootstrap: str, name: str) -> Counter[tuple[object, ...]]:
        return Counter((r.partition, r.key, r.value) for r in read_all(bootstrap, name))

    source = content(east.bootstrap, topic)
    assert sum(source.values()) == produced
    assert content(west.bootstrap, mirrored) == source  # every record, each once
