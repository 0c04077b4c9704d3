"""Pausing, stopping and resuming flows in the shared worker base (runners faked: no broker needed)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from mm2py.config.filters import TopicFilter
from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.config.patch import FlowPatch
from mm2py.runtime.flows import Claims
from mm2py.runtime.steering import FlowStateError
from mm2py.runtime.worker_base import WorkerBase
from tests.support.fake_flows import fake_controller

BASE = {"clusters": "east, west", "east.bootstrap.servers": "e:1", "west.bootstrap.servers": "w:1",
        "east->west.enabled": "true", "emit.heartbeats.enabled": "false"}


def _set(values: dict[str, Any]) -> FlowPatch:
    """A change setting ``values`` (MM2 names)."""
    return FlowPatch(values=values)


class FakeRunner:
    def __init__(self, flow: FlowConfig, claims: Claims | None = None) -> None:
        self.flow = flow
        self.controller = fake_controller(flow, claims)
        self.state = "UNASSIGNED"
        self.calls: list[str] = []

    async def start(self) -> None:
        self.calls.append("start")
        self.state = "RUNNING"

    async def stop(self) -> None:
        self.calls.append("stop")
        self.state = "STOPPED"

    async def refresh(self) -> None:
        self.calls.append("refresh")

    def set_topic_filter(self, topic_filter: TopicFilter) -> None:
        self.calls.append("filter")

    def status(self) -> dict[str, Any]:
        return {"name": self.flow.name, "state": self.state, "trace": None, "topics": {}, "tasks": []}


class FakeWorker(WorkerBase[FakeRunner]):
    def __init__(self, state_file: Path | None = None) -> None:
        super().__init__(MirrorMakerConfig.from_flat(BASE), str(state_file) if state_file else None)
        self.flows = {f.name: FakeRunner(f) for f in self.config.enabled_flows()}

    def _new_runner(self, flow: FlowConfig, claims: Claims) -> FakeRunner:
        return FakeRunner(flow, claims)

    async def start(self) -> None:
        self.startup.begin()
        for runner in self._runnable():
            await runner.start()


def test_a_stopped_flow_stays_stopped_across_changes_and_a_restart_until_resumed(tmp_path: Path) -> None:
    state = tmp_path / "state.json"

    async def first() -> FakeRunner:
        worker = FakeWorker(state)
        await worker.start()
        runner = worker.flows["east->west"]
        assert await worker.halt_flow("east->west", "PAUSED") is runner
        assert runner.state == "PAUSED" and runner.calls == ["start", "stop"]
        await worker.halt_flow("east->west", "STOPPED")  # already halted: not stopped twice
        assert runner.calls == ["start", "stop"] and runner.state == "STOPPED"
        await worker.update_flow("east->west", _set({"topics": "a.*"}))  # in place, no refresh while stopped
        assert runner.calls == ["start", "stop", "filter"] and runner.flow.topics == ("a.*",)
        fresh = await worker.update_flow("east->west", _set({"tasks.max": 3}))  # a new runner, not started
        assert fresh is not runner and fresh.calls == [] and fresh.state == "STOPPED"
        assert (await worker.restart_flow("east->west")).calls == []
        return fresh

    asyncio.run(first())

    async def second() -> None:
        worker = FakeWorker(state)  # the state file keeps it stopped
        await worker.start()
        runner = worker.flows["east->west"]
        assert runner.calls == [] and runner.state == "STOPPED" and runner.flow.tasks_max == 3
        resumed = await worker.resume_flow("east->west")
        assert resumed is not runner and resumed.calls == ["start"] and resumed.state == "RUNNING"
        assert (await worker.resume_flow("east->west")) is resumed  # running: nothing to do

    asyncio.run(second())
    assert FakeWorker(state).halted == {}


def test_offsets_change_only_while_stopped_and_a_halted_flow_is_removed_without_a_second_stop() -> None:
    async def run() -> None:
        worker = FakeWorker()
        await worker.start()
        with pytest.raises(FlowStateError, match=r"RUNNING.*only while it is STOPPED"):
            await worker.reset_offsets("east->west", None)
        await worker.halt_flow("east->west", "PAUSED")
        with pytest.raises(FlowStateError, match="PAUSED"):
            await worker.reset_offsets("east->west", None)
        runner = worker.flows["east->west"]
        await worker.remove_flow("east->west")
        assert runner.calls == ["start", "stop"] and worker.halted == {} and "east->west" not in worker.flows

    asyncio.run(run())


def test_the_spark_worker_refuses_an_offset_change_while_a_lease_still_holds_partitions() -> None:
    from types import SimpleNamespace

    from mm2py.runtime.spark.driver.worker import SparkWorker

    held = SimpleNamespace(leases=SimpleNamespace(writing=lambda name: name == "east->west"))
    with pytest.raises(FlowStateError, match="still holds partitions"):
        SparkWorker._check_no_writers(held, "east->west")  # type: ignore[arg-type]
    SparkWorker._check_no_writers(held, "north->west")  # type: ignore[arg-type]


def test_the_spark_worker_keeps_a_flow_the_state_file_keeps_stopped(tmp_path: Path) -> None:
    from mm2py.runtime.spark.driver.worker import SparkWorker

    state = tmp_path / "state.json"

    async def halt() -> None:
        worker = FakeWorker(state)
        await worker.start()
        await worker.halt_flow("east->west", "STOPPED")

    asyncio.run(halt())

    async def restart() -> None:  # (the worker is not started: no Spark session needed)
        spark = SparkWorker(MirrorMakerConfig.from_flat(BASE), spark=object(), state_file=str(state))
        assert spark.halted == {"east->west": "STOPPED"}
        assert spark._runnable() == [] and spark.flows["east->west"].state == "STOPPED"

    asyncio.run(restart())
