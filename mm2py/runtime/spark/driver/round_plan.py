"""The driver's plan of one Spark round (``--spark-mode rounds``): which tasks to ship, up to where.

The driver runs this; :mod:`mm2py.runtime.spark.executor.round` runs the work on an executor.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from mm2py.engine.task_contract import TaskSpec
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.spark.executor.round import RoundWork

__all__ = ["plan_round"]


def plan_round(
    flow: Any,
    assignment: Mapping[int, Sequence[TopicPartition]],
    ends: Mapping[TopicPartition, int],
    positions: Mapping[TopicPartition, int],
    *,
    budget: float,
    commit_interval: float = 1.0,
    hold: Collection[int] = (),
) -> list[RoundWork]:
    """The round's work: one :class:`RoundWork` per task that has something to mirror.

    A task is shipped when one of its partitions has an unknown position (never run, or its last
    round failed) or a position different from the source end. A partition is normally bounded by
    the source end; one whose committed position is past the end (the source log was truncated or
    the topic recreated) is bounded just past its position, so that the task fetches there and
    meets the source's reset, as the in-process runtime does. Tasks in ``hold`` (backing off after
    failures) and tasks without partitions are left out."""
    work = []
    for task_id, parts in sorted(assignment.items()):
        if not parts or task_id in hold:
            continue
        until = {}
        for tp in parts:
            if tp in ends:
                pos = positions.get(tp)
                until[tp] = pos + 1 if pos is not None and pos > ends[tp] else ends[tp]
        if any(positions.get(tp) != ends[tp] for tp in until):
            spec = TaskSpec(flow, task_id, tuple(parts))
            work.append(RoundWork(spec, until, budget, commit_interval))
    return work
