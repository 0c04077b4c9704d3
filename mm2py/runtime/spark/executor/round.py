"""One round of one mirror task, as the Spark runtime runs it on an executor (``--spark-mode rounds``).

The driver (:mod:`mm2py.runtime.spark.driver.worker`) is the controller. Each round it ships, per
task with work to do, a :class:`RoundWork` (plain picklable data: the task's :class:`TaskSpec` and
the source end offsets seen at round start) to an executor, where :func:`run_round` builds the task
with the same code the in-process runtime uses (``mm2py.connectors.mirror_task.build_task``), mirrors
until every partition reached its bound or the round's time budget is spent, commits, closes its
clients and returns a small :class:`RoundResult`.


Nothing is carried from one round to the next but what the task code persists: each round loads
its positions from ``mm2-offsets.<source>.internal`` and the tail reconciler skips batches that
reached the target after the last commit, so a round that died half-way is resumed exactly.
A round never raises: whatever went wrong is in ``RoundResult.error`` for the driver to report.

This module does not import pyspark: executors only need mm2py and its dependencies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from mm2py.engine.task import TaskRunner
from mm2py.engine.task_contract import TaskMetrics, TaskSpec
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.spark.executor.common import capture_warnings

log = logging.getLogger(__name__)

#: how often the executor checks whether the round reached its bound
_WATCH_SECONDS = 0.02


@dataclass(frozen=True)
class RoundWork:
    """What an executor needs for one round of one task (picklable)."""

    spec: TaskSpec
    until: Mapping[TopicPartition, int]  # source end offsets at round start: the round's bound
    budget: float = 10.0  # seconds of mirroring before the round stops early (and commits)
    commit_interval: float = 1.0  # periodic commits inside a long round

    @property
    def flow(self) -> str:
        return str(self.spec.flow.name)


@dataclass
class RoundResult:
    """What an executor reports for one round (picklable, small)."""

    flow: str
    task_id: int
    partitions: tuple[TopicPartition, ...]
    positions: dict[TopicPartition, int] = field(default_factory=dict)  # committed (empty on error)
    metrics: TaskMetrics = field(default_factory=TaskMetrics)
    complete: bool = False  # every partition reached the round's bound
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    executor: str = ""


def reached(positions: Mapping[TopicPartition, int], until: Mapping[TopicPartition, int]) -> bool:
    """True when every bounded partition's position is at or past its bound."""
    return all(positions.get(tp, -1) >= end for tp, end in until.items())


async def _mirror(work: RoundWork, result: RoundResult) -> None:
    from mm2py.connectors.mirror_task import build_task  # runtime composes connectors

    started = time.monotonic()
    deadline = started + work.budget
    runner: TaskRunner = await asyncio.wait_for(
        build_task(work.spec, commit_interval=work.commit_interval), max(30.0, work.budget)
    )
    try:
        result.metrics = runner.metrics
        stop = asyncio.Event()
        running = asyncio.create_task(runner.run(stop))
        while not running.done():
            if reached(runner.positions(), work.until) or time.monotonic() >= deadline:
                stop.set()  # the task finishes the batches in hand and commits
                break
            await asyncio.wait({running}, timeout=_WATCH_SECONDS)
        await running  # the task's own failure (e.g. a corrupt batch it refused to forward)
        missing = set(work.spec.partitions) - set(runner.partitions)
        if missing:
            result.error = (f"the task did not take {len(missing)} of its partitions within "
                            f"{work.budget:.0f}s (could it load its progress and reach both clusters?)")
            return
        # run() commits on its way out but cannot say whether that worked; an empty bound makes
        # run_until commit again (nothing new, so nothing is written) and raise if it cannot
        positions = await runner.run_until({}, timeout=60)
        result.positions = {tp: positions[tp] for tp in work.spec.partitions}
        result.complete = reached(positions, work.until)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(runner.close(), 30)


def run_round(work: RoundWork) -> RoundResult:
    """Run one round of one task on this process (an executor); never raises."""
    result = RoundResult(work.flow, work.spec.task_id, tuple(work.spec.partitions),
                         executor=f"{socket.gethostname()}:{os.getpid()}")
    started = time.monotonic()
    with capture_warnings() as warnings:
        try:
            asyncio.run(_mirror(work, result))
        except Exception as exc:
            result.error = f"{type(exc).__name__}: {exc}"
            result.positions = {}
    result.warnings = warnings
    result.seconds = time.monotonic() - started
    return result
