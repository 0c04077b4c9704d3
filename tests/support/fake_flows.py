"""A flow runner's controller over a source whose topics a test sets (no broker): what the worker
reads of a runner's controller (its topic rule, ``claimed_by``) and of its admin client (the
source's topics, for the overlap check of several flows per pair)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.engine.controller import Controller
from mm2py.rdkafka.admin import TopicInfo
from mm2py.runtime.flows import Claims, controller_for
from mm2py.runtime.worker_base import WorkerBase


class SourceTopics:
    """An admin client that only lists topics: ``topics`` (shared, a test may change it)."""

    def __init__(self, topics: set[str]) -> None:
        self.topics = topics

    def list_topics(self) -> dict[str, TopicInfo]:
        return {t: TopicInfo(t, 1, 1) for t in self.topics}


#: the source topics every fake controller lists (tests set it)
SOURCE_TOPICS: set[str] = set()


def fake_controller(flow: FlowConfig, claims: Claims | None = None) -> Controller:
    admin: Any = SourceTopics(SOURCE_TOPICS)
    return controller_for(flow, (admin, admin), claims)


BASE = {"clusters": "east, west", "east.bootstrap.servers": "e:1", "west.bootstrap.servers": "w:1",
        "emit.heartbeats.enabled": "false", "tasks.max": "2"}


class FakeRunner:
    def __init__(self, flow: FlowConfig, claims: Claims | None = None) -> None:
        self.flow = flow
        self.controller = fake_controller(flow, claims)
        self.state = "UNASSIGNED"
        self.trace: str | None = None  # what the operator page reads of a runner, besides status()
        self.last_plan: Any = None
        self.calls: list[str] = []
        self.tasks: dict[int, Any] = {}  # none runs
        self.checkpoints: Any = None

    @property
    def name(self) -> str:
        return self.flow.name

    async def start(self) -> None:
        self.calls.append("start")
        self.state = "RUNNING"

    async def stop(self) -> None:
        self.calls.append("stop")
        self.state = "STOPPED"

    async def refresh(self) -> None:
        self.calls.append("refresh")

    def set_topic_filter(self, topic_filter: Any) -> None:
        self.controller.set_topic_filter(topic_filter)

    def status(self) -> dict[str, Any]:
        """What the REST API reads of a runner (no task runs)."""
        return {"name": self.name, "state": self.state, "trace": None, "topics": {}, "tasks": []}

    def forget_acknowledged(self) -> None:
        self.calls.append("forget_acknowledged")


class FakeWorker(WorkerBase[FakeRunner]):
    def __init__(self, state_file: Path | None = None, **extra: str) -> None:
        super().__init__(MirrorMakerConfig.from_flat({**BASE, **extra}),
                         str(state_file) if state_file else None)
        self.flows = self._initial_runners()

    def _new_runner(self, flow: FlowConfig, claims: Claims) -> FakeRunner:
        return FakeRunner(flow, claims)

    async def start(self) -> None:
        self.startup.begin()
        for runner in self._runnable():
            await runner.start()
