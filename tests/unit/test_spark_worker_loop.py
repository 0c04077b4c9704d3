"""The Spark worker's own loop: rounds or lease steps, the status lines and the stop watch are
scheduler jobs; ``run_blocking`` stops soon after its ``threading.Event`` is set. Spark, the
clusters and the flows' start and stop are faked: no broker, no JVM."""

from __future__ import annotations

import logging
import threading
import time
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


def _run(worker: SparkWorker, seconds: float) -> float:
    """run_blocking in a thread for ``seconds``; how long it took to stop once told to."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def main() -> None:
        try:
            worker.run_blocking(stop, status_interval=0.2)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    time.sleep(seconds)
    stopping = time.monotonic()
    stop.set()
    thread.join(10)
    assert not thread.is_alive() and not errors, errors
    return time.monotonic() - stopping


@pytest.mark.parametrize("mode", ["rounds", "leases"])
def test_the_worker_runs_its_steps_logs_status_lines_and_stops_when_told(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []
    worker = _worker(mode, calls)
    with caplog.at_level(logging.INFO, logger="mm2py.runtime.spark.driver.worker"):
        took = _run(worker, 1.0)
    assert took < 1.5
    assert calls[0] == "start" and calls[-1] == "stop" and calls.count("stop") == 1
    steps = calls.count("round") if mode == "rounds" else worker.leases.steps  # type: ignore[union-attr]
    assert steps >= 3  # every idle_seconds (0.05 s) for a second, on a busy host
    status = [r.getMessage() for r in caplog.records if r.getMessage().startswith("east->west: ")]
    assert 2 <= len(status) <= 6, status  # every 0.2 s for a second
    suffix = "Spark rounds" if mode == "rounds" else "Spark leases running"
    assert all(suffix in line for line in status)


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
