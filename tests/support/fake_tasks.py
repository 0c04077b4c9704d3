"""Tasks as a flow runner shows them, and a clock a test moves: what the operator page's sampler
and state read (no runner, no broker)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mm2py.engine.task_contract import TaskMetrics, TaskState
from mm2py.protocol.types import TopicPartition

TP0, TP1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


@dataclass
class Task:
    """A task as a flow runner shows it (the in-process TaskRunner's attributes)."""

    partitions: tuple[TopicPartition, ...]
    metrics: TaskMetrics = field(default_factory=TaskMetrics)
    state: TaskState = TaskState.RUNNING
    trace: str | None = None
    acked: dict[TopicPartition, int] = field(default_factory=dict)

    def positions(self) -> dict[TopicPartition, int]:
        return dict(self.acked)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
