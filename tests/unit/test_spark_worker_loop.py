"""The Spark worker's own loop: rounds or lease steps, the status lines and the stop watch are
scheduler jobs; ``run_blocking`` stops soon after its ``threading.Event`` is set. Spark, the
clusters and the flows' start and stop are faked: no broker, no JVM."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from mm2py.config.models import MirrorMakerConfig
from mm2py.runtime.spark.driver.worker import SparkWorker

BASE = {"clusters": "east, west", "east.bootstrap.servers": "127.0.0.1:1",
        "west.bootstrap.servers": "127.0.0.1:1", "east->west.enabled": "true",
        "emit.heartbeats.enabled": "false"}


class FakeLeases:
    def __init__(self) -> None:
        self.steps = 0
        self.started = 0
        self.hosts = None  # a Spark job per lease (the status line names no mirror hosts)

    async def step(self) -> None:
        self.steps += 1

    def leases_running(self) -> int:
        return 0


def _worker(mode: str, calls: list[str]) -> SparkWorker:
    worker = SparkWorker(MirrorMakerConfig.from_flat(BASE), spark=object(), mode=mode, idle_seconds=0.05)
    leases = FakeLeases()

    async def start() -> None:
        calls.append("start")
        if mode == "leases":
            worker.leases = leases  # type: ignore[assignment]

    async def stop() -> None:
        calls.append("stop")

    async def run_round() -> list[Any]:
        calls.append("round")
        return [SimpleNamespace(complete=True)]

    worker.start = start  # type: ignore[method-assign]
    worker.stop = stop  # type: ignore[method-assign]
    worker.run_round = run_round  # type: ignore[method-assign]
    return worker


def _run(worker: SparkWorker, until: Callable[[], bool]) -> tuple[float, float]:
    """run_blocking in a thread until ``until()`` holds (30 s at most); how long it ran, and how
    long it took to stop once told to."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def main() -> None:
        try:
            worker.run_blocking(stop, status_interval=0.2)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=main, daemon=True)
    started = time.monotonic()
    thread.start()
    while not until() and time.monotonic() - started < 30 and thread.is_alive():
        time.sleep(0.01)
    stopping = time.monotonic()
    stop.set()
    thread.join(30)
    assert not thread.is_alive() and not errors, errors
    return stopping - started, time.monotonic() - stopping


@pytest.mark.parametrize("mode", ["rounds", "leases"])
def test_the_worker_runs_its_steps_logs_status_lines_and_stops_when_told(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []
    worker = _worker(mode, calls)
    steps_at: list[tuple[int, float]] = []  # (steps so far, when first seen): this host's pace

    def steps() -> int:
        if mode == "rounds":
            return calls.count("round")
        return worker.leases.steps if worker.leases is not None else 0

    def status() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("east->west: ")]

    def enough() -> bool:
        n = steps()
        if not steps_at or steps_at[-1][0] != n:
            steps_at.append((n, time.monotonic()))
        return n >= 3 and len(status()) >= 2

    with caplog.at_level(logging.INFO, logger="mm2py.runtime.spark.driver.worker"):
        ran, took = _run(worker, enough)
    assert steps() >= 3, "fewer than three rounds or lease steps in 30 s"  # every idle_seconds (0.05 s)
    # the stop watch looks every 0.1 s: 1.5 s, or a second and three of the gaps between steps
    # this host took, if longer
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(steps_at)]
    assert took < max(1.5, 1.0 + 3 * max(gaps, default=0.0)), (took, gaps)
    assert calls[0] == "start" and calls[-1] == "stop" and calls.count("stop") == 1
    lines = status()
    assert 2 <= len(lines) <= ran / 0.2 + 2, (ran, lines)  # every 0.2 s, not more often
    suffix = "Spark rounds" if mode == "rounds" else "Spark leases running"
    assert all(suffix in line for line in lines)


def test_a_stop_set_before_the_worker_started_stops_it_at_once() -> None:
    calls: list[str] = []
    worker = _worker("rounds", calls)
    stop = threading.Event()
    stop.set()
    started = time.monotonic()
    worker.run_blocking(stop, status_interval=0.2)
    assert time.monotonic() - started < 2
    assert calls[0] == "start" and calls[-1] == "stop"
    assert calls.count("round") <= 1


class FakeTracker:
    """Spark's status tracker as SPARK_GAVE_UP asks it: a host's job group, its job, its stage."""

    def __init__(self, status: str, failed: int) -> None:
        self.status, self.failed = status, failed

    def getJobIdsForGroup(self, group: str) -> list[int]:  # pyspark's names
        return [7] if group == "host-0" else []

    def getJobInfo(self, job_id: int) -> Any:
        return SimpleNamespace(jobId=job_id, stageIds=[3], status=self.status)

    def getStageInfo(self, stage_id: int) -> Any:
        return SimpleNamespace(stageId=stage_id, numFailedTasks=self.failed)


def test_a_hosts_failed_attempts_count_only_while_its_job_runs_on() -> None:
    """SPARK_GAVE_UP asks the host's job group: its failed attempts while the job is RUNNING (a
    lost executor's attempt, which Spark runs again); none once the job ended (a failure Spark
    counted against the task ends the job, whose own error must be what the tasks report)."""
    worker = SparkWorker(MirrorMakerConfig.from_flat(BASE), spark=object(), idle_seconds=0.05)
    for status, failed, expected in (("RUNNING", 1, 1), ("RUNNING", 0, 0), ("FAILED", 1, 0),
                                     ("SUCCEEDED", 1, 0)):
        tracker = FakeTracker(status, failed)
        worker.spark = SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=lambda t=tracker: t))
        assert worker._failed_host_attempts("host-0") == expected, (status, failed)
        assert worker._failed_host_attempts("host-9") == 0
    worker.spark = None  # no session (any more): nothing counted
    assert worker._failed_host_attempts("host-0") == 0
