"""mm2py.rest_api.connect.halted on the shared worker base (runners faked, no broker): pausing or
stopping the facade's checkpoint or heartbeat connector turns its job off and keeps its state in the
state file; resuming applies its config again; restarting leaves it as configured; one created halted
has no task until resumed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mm2py.config.filters import TopicFilter
from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.rest_api.connect.config import CLASSES
from mm2py.rest_api.connect.halted import HaltedConnectors
from mm2py.runtime.flows import Claims
from mm2py.runtime.worker_base import WorkerBase
from tests.support.fake_flows import fake_controller

BASE = {"clusters": "east, west", "east.bootstrap.servers": "127.0.0.1:1",
        "west.bootstrap.servers": "127.0.0.1:2",
        "east->west.enabled": "true", "emit.heartbeats.enabled": "false"}
PAIR = {"source.cluster.alias": "east", "target.cluster.alias": "west"}


class Runner:
    def __init__(self, flow: FlowConfig, claims: Claims | None = None) -> None:
        self.flow = flow
        self.controller = fake_controller(flow, claims)
        self.state = "UNASSIGNED"

    async def start(self) -> None:
        self.state = "RUNNING"

    async def stop(self) -> None:
        self.state = "STOPPED"

    async def refresh(self) -> None:
        return None

    def set_topic_filter(self, topic_filter: TopicFilter) -> None:
        return None

    def status(self) -> dict[str, Any]:
        return {"name": self.flow.name, "state": self.state, "trace": None, "topics": {}, "tasks": []}


class Worker(WorkerBase[Runner]):
    def __init__(self, state_file: Path) -> None:
        super().__init__(MirrorMakerConfig.from_flat(BASE), str(state_file))
        self.flows = {f.name: Runner(f) for f in self.config.enabled_flows()}

    def _new_runner(self, flow: FlowConfig, claims: Claims) -> Runner:
        return Runner(flow, claims)


def _on_disk(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text())["sections"].get("connector_states", {}))


async def test_a_paused_checkpoint_connector_turns_checkpoints_off_until_resumed(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    worker = Worker(state_file)
    halted = HaltedConnectors(worker)
    config = {"connector.class": CLASSES["checkpoint"], **PAIR, "emit.checkpoints.interval.seconds": "7",
              "sync.group.offsets.enabled": "true"}
    await halted.apply("checkpoint", config, halted=False)
    flow = worker.flows["east->west"].flow
    assert (flow.emit_checkpoints_enabled, flow.sync_group_offsets_enabled,
            flow.emit_checkpoints_interval_seconds) == (True, True, 7)
    await halted.halt("ckpt", "checkpoint", config, "PAUSED")
    flow = worker.flows["east->west"].flow
    assert not flow.emit_checkpoints_enabled and not flow.sync_group_offsets_enabled
    assert halted.get("ckpt") == "PAUSED" and halted.has_tasks("ckpt")
    assert _on_disk(state_file) == {"ckpt": {"state": "PAUSED", "tasks": True}}
    await halted.resume("ckpt", "checkpoint", config)
    flow = worker.flows["east->west"].flow
    assert (flow.emit_checkpoints_enabled, flow.sync_group_offsets_enabled,
            flow.emit_checkpoints_interval_seconds) == (True, True, 7)
    assert halted.get("ckpt") is None and _on_disk(state_file) == {}
    # the section is the state file's: a worker reading the file again sees the same
    await halted.halt("ckpt", "checkpoint", config, "STOPPED")
    again = Worker(state_file)
    assert HaltedConnectors(again).get("ckpt") == "STOPPED"


async def test_a_stopped_heartbeat_connector_turns_the_pairs_heartbeats_off(tmp_path: Path) -> None:
    worker = Worker(tmp_path / "state.json")
    halted = HaltedConnectors(worker)
    config = {"connector.class": CLASSES["heartbeat"], **PAIR, "emit.heartbeats.interval.seconds": "3"}
    await halted.apply("heartbeat", config, halted=False)
    assert worker.flows["east->west"].flow.emit_heartbeats_enabled
    assert worker.flows["east->west"].flow.emit_heartbeats_interval_seconds == 3
    assert set(worker.startup.heartbeats) == {"east->west"}
    await halted.halt("beats", "heartbeat", config, "STOPPED")
    assert not worker.flows["east->west"].flow.emit_heartbeats_enabled
    assert worker.startup.heartbeats == {} and halted.get("beats") == "STOPPED"
    await halted.restart("heartbeat", config)
    assert worker.flows["east->west"].flow.emit_heartbeats_enabled, "a restart left the job off"
    await halted.resume("beats", "heartbeat", config)
    assert halted.get("beats") is None and set(worker.startup.heartbeats) == {"east->west"}


async def test_resuming_a_connector_that_is_not_halted_changes_nothing(tmp_path: Path) -> None:
    worker = Worker(tmp_path / "state.json")
    halted = HaltedConnectors(worker)
    runner = worker.flows["east->west"]
    await halted.resume("ckpt", "checkpoint", {"connector.class": CLASSES["checkpoint"], **PAIR,
                                               "emit.checkpoints.interval.seconds": "9"})
    assert worker.flows["east->west"] is runner and runner.flow.emit_checkpoints_interval_seconds != 9


def test_one_created_halted_has_no_task_until_resumed(tmp_path: Path) -> None:
    halted = HaltedConnectors(Worker(tmp_path / "state.json"))
    assert halted.has_tasks("new") and halted.get("new") is None
    halted.set("new", "STOPPED", created=True)
    assert not halted.has_tasks("new")
    halted.set("new", "PAUSED")
    assert halted.get("new") == "PAUSED" and not halted.has_tasks("new"), "a task appeared while halted"
    halted.set("new", None)
    assert halted.has_tasks("new") and halted.get("new") is None
