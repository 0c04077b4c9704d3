"""A flow whose cluster is down at start: started again in the background with back-off, as a
one-off job of the scheduler (the shared worker base; runners faked: no broker needed)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

import pytest

from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.errors import ClusterUnreachableError
from mm2py.runtime.flows import Claims, FlowRunnerBase
from mm2py.runtime.worker_base import WorkerBase
from tests.support.fake_flows import fake_controller

BASE = {"clusters": "east, west", "east.bootstrap.servers": "e:1", "west.bootstrap.servers": "w:1",
        "east->west.enabled": "true", "emit.heartbeats.enabled": "false"}


class FlakyRunner:
    """Its start fails with each of ``failures`` in turn, then works."""

    def __init__(self, flow: FlowConfig, failures: list[Exception], claims: Claims | None = None) -> None:
        self.flow = flow
        self.controller = fake_controller(flow, claims)
        self.failures = list(failures)
        self.attempts: list[float] = []
        self.state = "UNASSIGNED"

    async def start(self) -> None:
        self.attempts.append(time.monotonic())
        if self.failures:
            self.state = "FAILED"
            raise self.failures.pop(0)
        self.state = "RUNNING"

    async def stop(self) -> None:
        self.state = "STOPPED"

    def status(self) -> dict[str, Any]:
        return {"name": self.flow.name, "state": self.state, "trace": None, "topics": {}, "tasks": []}


#: a retried start 0.05 s after the first, then doubling up to 0.2 s
QUICK = {"east->west.mm2py.start.retry.backoff.ms": "50",
         "east->west.mm2py.start.retry.backoff.max.ms": "200"}


class FlakyWorker(WorkerBase[FlakyRunner]):
    def __init__(self, failures: list[Exception], settings: dict[str, str] = QUICK) -> None:
        super().__init__(MirrorMakerConfig.from_flat({**BASE, **settings}), None)
        self.flows = {f.name: FlakyRunner(f, failures) for f in self.config.enabled_flows()}

    def _new_runner(self, flow: FlowConfig, claims: Claims) -> FlakyRunner:
        return FlakyRunner(flow, [], claims)

    async def shut(self) -> None:
        await self.startup.stop()


def _down(n: int) -> list[Exception]:
    return [ClusterUnreachableError(f"cluster 'east' (e:1) unreachable ({i})") for i in range(n)]


async def _until(check: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_a_flow_whose_cluster_is_down_is_started_again_with_a_growing_delay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> FlakyRunner:
        worker = FlakyWorker(_down(5))  # the first start and four retries fail, the fifth works
        runner = worker.flows["east->west"]
        await worker.startup.start_flows(worker.flows.values())  # does not wait for the retries
        assert runner.state == "FAILED" and len(runner.attempts) == 1
        await _until(lambda: runner.state == "RUNNING")
        await worker.shut()
        return runner

    with caplog.at_level(logging.INFO):
        runner = asyncio.run(main())
    gaps = [b - a for a, b in itertools.pairwise(runner.attempts)]
    assert len(gaps) == 5
    # 0.05 s, then doubling (0.1, 0.2) and no longer than the longest delay from then on
    for gap, least in zip(gaps, [0.05, 0.1, 0.2, 0.2, 0.2], strict=True):
        assert gap >= least * 0.9, gaps
    # capped: 0.2 + 0.2 s, not 0.4 + 0.8 (generous for a busy host)
    assert sum(gaps[3:]) < 1.0, gaps
    messages = [r.getMessage() for r in caplog.records]
    assert sum("east->west: not started" in m and "trying again in the background" in m
               for m in messages) == 1
    retried = [m for m in messages if m.startswith("east->west: delayed start failed")]
    assert len(retried) == 4 and all("ClusterUnreachableError" in m for m in retried)
    assert messages[-1] == "east->west: started"


def test_another_start_failure_gives_up_and_a_removed_flow_is_not_started() -> None:
    async def gives_up() -> FlakyRunner:
        worker = FlakyWorker([*_down(1), ValueError("the broker refused the topic config"), *_down(1)])
        await worker.startup.start_flows(worker.flows.values())
        runner = worker.flows["east->west"]
        await _until(lambda: len(runner.attempts) == 2)
        await asyncio.sleep(0.5)  # no third attempt: the retry gave up
        assert all(t.done() for t in worker.startup.retries)
        await worker.shut()
        return runner

    async def removed() -> FlakyRunner:
        worker = FlakyWorker(_down(1))
        await worker.startup.start_flows(worker.flows.values())
        runner = worker.flows["east->west"]
        await worker.remove_flow("east->west")
        await asyncio.sleep(0.3)
        assert all(t.done() for t in worker.startup.retries)
        await worker.shut()
        return runner

    assert len(asyncio.run(gives_up()).attempts) == 2
    assert len(asyncio.run(removed()).attempts) == 1


def test_stopping_the_worker_ends_the_retries_at_once() -> None:
    async def main() -> float:
        worker = FlakyWorker(_down(100), {"east->west.mm2py.start.retry.backoff.ms": "3600000"})
        await worker.startup.start_flows(worker.flows.values())
        await asyncio.sleep(0.05)
        stopping = time.monotonic()
        worker.startup.stopping.set()
        await asyncio.wait_for(asyncio.gather(*worker.startup.retries), 5)  # ends by itself, not cancelled
        assert len(worker.flows["east->west"].attempts) == 1
        return time.monotonic() - stopping

    assert asyncio.run(main()) < 2.0


class RefreshFailsOnce(FlowRunnerBase[Any]):
    """A real flow runner whose first topic refresh finds the cluster unreachable."""

    def __init__(self, flow: FlowConfig) -> None:
        self._init_flow(flow)
        self.refreshes = 0

    async def refresh(self) -> Any:
        self.refreshes += 1
        if self.refreshes == 1:
            raise ClusterUnreachableError("cluster 'east' (e:1): every broker refused connections")
        return None

    async def stop(self) -> None:
        await self._stop_jobs()


def test_a_start_that_works_after_a_failed_one_clears_the_failures_trace() -> None:
    """The status of a flow started by a retry shows RUNNING without the first start's failure."""
    quiet = {"emit.checkpoints.enabled": "false", "sync.group.offsets.enabled": "false",
             "sync.topic.acls.enabled": "false"}
    flow = MirrorMakerConfig.from_flat({**BASE, **quiet}).flow("east", "west")

    async def main() -> list[tuple[str, str | None]]:
        runner = RefreshFailsOnce(flow)
        seen = []
        with pytest.raises(ClusterUnreachableError):
            await runner.start()
        seen.append((runner.state, runner.trace))
        await runner.start()
        seen.append((runner.state, runner.trace))
        await runner.stop()
        return seen

    (failed, failed_trace), (running, trace) = asyncio.run(main())
    assert failed == "FAILED" and failed_trace is not None and "refused connections" in failed_trace
    assert running == "RUNNING" and trace is None
