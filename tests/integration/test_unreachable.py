"""A cluster that refuses connections, or never answers: reported within seconds with the reason,
a quiet log, and a worker that stops at once on SIGINT in every phase. No broker is needed: a
closed loopback port refuses, a listening socket that never accepts stays silent."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mm2py.errors import ClusterUnreachableError
from mm2py.rdkafka.admin import ClusterAdmin
from tests.support.interrupted_run import LOADING, TIMED, CommandRun, assert_clean_stop, interrupt_at

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose listen queue is full: connections neither complete nor are refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(0)
    fillers = []
    for _ in range(8):  # fill the backlog so further SYNs go unanswered
        c = socket.socket()
        c.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            c.connect(("127.0.0.1", s.getsockname()[1]))
        fillers.append(c)
    yield int(s.getsockname()[1])
    for c in fillers:
        c.close()
    s.close()


def test_an_admin_call_to_a_refusing_cluster_fails_within_the_unreachable_timeout() -> None:
    admin = ClusterAdmin("east", f"127.0.0.1:{_closed_port()}", timeout=60, unreachable_timeout=2)
    started = time.monotonic()
    with pytest.raises(ClusterUnreachableError) as err:
        admin.list_topics()
    assert time.monotonic() - started < 6
    assert "'east'" in str(err.value) and "Connection refused" in str(err.value)


def _config(tmp_path: Path, bootstrap: str, **settings: object) -> Path:
    path = tmp_path / "mm2.json"
    path.write_text(json.dumps({"clusters": {"east": bootstrap, "west": bootstrap},
                                "flows": {"east->west": {"topics": ".*"}}, **settings}))
    return path


def test_run_against_a_refusing_cluster_says_so_briefly_keeps_trying_and_stops_on_sigint(
    tmp_path: Path,
) -> None:
    """A cluster that refuses connections: the reason (naming the cluster) is logged at once, then
    only at a slow pace while the worker keeps trying; SIGINT stops it within seconds.

    The worker's timers are those of a minute scaled down twelve times (unreachable after 5 s,
    starts retried 5, 10, 20, 40 s apart, a repeated warning once a minute): the same sequence of
    attempts and log lines in five seconds."""
    port = _closed_port()
    config = _config(tmp_path, f"127.0.0.1:{port}", **{
        "mm2py.unreachable.timeout.ms": 400, "mm2py.start.retry.backoff.ms": 400,
        "mm2py.start.retry.backoff.max.ms": 5000})
    run = CommandRun(["run", "-c", str(config), "--log-repeat-seconds", "5"], tmp_path, "run")
    try:
        # a held-back repeat released with its count: the worker kept trying past one repeat interval
        run.wait_for("more like it in the last 5s", plus=2 * 5)
        lines = run.stderr().splitlines()
        # records, not lines: a loaded machine may add one multi-line "event loop stalled" report
        records = [line for line in lines if re.match(r"\d{4}-\d\d-\d\d ", line)]
        assert len(records) < 20, "\n".join(lines[:80])
        assert any("not started" in line and "Connection refused" in line for line in lines), lines
        assert f"cluster 'east' (127.0.0.1:{port})" in run.stderr(), lines
        run.interrupt()
        status, _ = run.finish()  # within a few times the start-up's own time (a retry is not awaited)
        run.assert_clean(status, 0)
    finally:
        run.kill()


@pytest.mark.parametrize("milestone,settings,status", [
    # its modules still loading: nothing started, nothing to stop (the documented 130)
    (LOADING, {}, 130),
    # start-up waiting for the silent cluster (an admin call would wait ten minutes)
    ("mirroring:", {"admin.timeout.ms": 600_000}, 0),
    # the first start gave up; starts are retried in the background, each waiting on the cluster
    ("not started", {"admin.timeout.ms": 1000, "mm2py.start.retry.backoff.ms": 200}, 0),
], ids=["loading", "start-up", "retrying"])
def test_sigint_against_a_silent_cluster_stops_cleanly_in_every_phase(
    tmp_path: Path, silent_port: int, milestone: str, settings: dict[str, object], status: int
) -> None:
    """SIGINT while mm2py loads, while its start-up waits for a cluster that never answers, and
    while the start is retried: a clean exit (the documented status, no traceback) within a few
    times what the process took to print its first line."""
    config = _config(tmp_path, f"127.0.0.1:{silent_port}", **settings)
    run = CommandRun(["run", "-c", str(config)], tmp_path, "run")
    try:
        run.wait_for(milestone)
        run.interrupt()
        run.assert_clean(run.finish()[0], status)
        if milestone == "mirroring:":
            assert "interrupted: the process is stopping" in run.text()  # the wait was cut short
            # what the stop cut short is not reported as a failure (nor a start "tried again")
            assert " ERROR " not in run.stderr() and "WARNING mm2py.engine.scheduler" not in run.stderr()
    finally:
        run.kill()


def test_sigint_against_a_silent_cluster_at_issue_48s_moments_stops_cleanly(
    tmp_path: Path, silent_port: int
) -> None:
    """Four runs at once, interrupted 0.2, 1, 4 and 10 s after mm2py's code took over in each:
    whatever each was doing then (loading, or its start-up waiting for the cluster), a clean exit
    with the documented status and no traceback."""
    config = _config(tmp_path, f"127.0.0.1:{silent_port}", **{"admin.timeout.ms": 600_000})
    runs = [CommandRun(["run", "-c", str(config)], tmp_path, f"run{i}") for i in range(len(TIMED))]
    try:
        served = interrupt_at(list(zip(runs, TIMED, strict=True)))
        for run in runs:
            assert_clean_stop(run, served[run])
    finally:
        for run in runs:
            run.kill()


def test_a_request_the_broker_refuses_is_not_called_unreachable(east: Any) -> None:
    """The cluster answered with an error code: a clear refusal naming the cluster, at once."""
    from mm2py.rdkafka.admin import BrokerRefusedError, TopicSpec

    admin = ClusterAdmin("east", east.bootstrap, timeout=60)
    started = time.monotonic()
    with pytest.raises(BrokerRefusedError) as err:
        admin.create_topics([TopicSpec(f"refused-{os.getpid()}", 1, 1, {"cleanup.policy": "sometimes"})])
    assert time.monotonic() - started < 10
    assert "'east'" in str(err.value) and "refused" in str(err.value)
    assert not isinstance(err.value, ClusterUnreachableError)
