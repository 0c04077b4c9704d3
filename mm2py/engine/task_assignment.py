"""A mirror task's assignment: which partitions it mirrors, and where each new one starts.

The part of :class:`~mm2py.engine.task.TaskRunner` that takes a new assignment between two rounds of
its loop: partitions given up are committed for their next owner first, new ones start where
:func:`~mm2py.engine.starts.resolve_starts` says; a remote partition found ending below its
committed target end is ``target.truncated`` before anything is produced to it, and the source topic
ids the stored positions were written with go to the source, which reports a topic created again
since (``engine/losses.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from mm2py.engine.committer import Committer, snapshot
from mm2py.engine.losses import LossWatch
from mm2py.engine.offset_syncs import OffsetSyncPlanner
from mm2py.engine.refusals import PartitionRefusals
from mm2py.engine.starts import StartRetry, resolve_starts
from mm2py.engine.task_contract import (
    BatchSink,
    BatchSource,
    ProgressKeeper,
    Reconciler,
    TaskMetrics,
    TaskSpec,
    TaskState,
)
from mm2py.engine.task_positions import TaskPositions
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition

__all__ = ["TaskAssignment"]

log = logging.getLogger("mm2py.engine.task")


class TaskAssignment:
    """The assignment half of a :class:`~mm2py.engine.task.TaskRunner` (which sets these fields)."""

    spec: TaskSpec
    source: BatchSource
    sink: BatchSink
    progress: ProgressKeeper
    reconcile: Reconciler | None
    planner: OffsetSyncPlanner
    refusals: PartitionRefusals
    committer: Committer
    metrics: TaskMetrics
    losses: LossWatch
    verify: bool
    state: TaskState
    #: where the task stands in each partition (their one owner)
    _pos: TaskPositions
    _pending_assignment: tuple[TopicPartition, ...] | None
    _assignment_applied: asyncio.Event
    _start_retry: StartRetry
    _seeds: dict[TopicPartition, Position]

    # -- assignment ----------------------------------------------------------------------------
    @property
    def partitions(self) -> tuple[TopicPartition, ...]:
        return tuple(sorted(self._pos))

    def positions(self) -> dict[TopicPartition, int]:
        """Acknowledged positions (next source offset not yet on the target)."""
        return dict(self._pos.acked)

    @property
    def assignment(self) -> tuple[TopicPartition, ...]:
        """The partitions this task is to mirror (an assignment not yet taken included)."""
        return self.partitions if self._pending_assignment is None else tuple(self._pending_assignment)

    def committed_positions(self) -> dict[TopicPartition, Position]:
        """Each partition's acknowledged position with the target end it maps to."""
        pos = self._pos
        return snapshot(pos.acked, pos.target_next, pos.acked, pos.topic_ids)

    def seed(self, positions: Mapping[TopicPartition, Position]) -> None:
        """Start these partitions, when assigned, exactly at ``positions`` (a clean hand-over)."""
        self._seeds.update(positions)

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Change the assignment; partitions kept keep their positions (no restart)."""
        self._pending_assignment = tuple(partitions)
        self._assignment_applied.clear()
        self._start_retry.reset()  # a new assignment is taken at once, deferred starts or not

    async def release(self, keep: Sequence[TopicPartition], timeout: float = 60.0) -> bool:
        """Give up every partition not in ``keep``; wait until the task no longer produces them and
        has committed their positions (another task takes over). False if not within ``timeout``."""
        self.assign([tp for tp in self.partitions if tp in set(keep)])
        if self.state != TaskState.RUNNING:
            return False  # nothing is producing; the next owner resumes from the last commit
        try:
            await asyncio.wait_for(self._assignment_applied.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def _apply_assignment(self) -> None:
        wanted = self._pending_assignment
        if wanted is None or not self._start_retry.due():
            return
        try:
            deferred = await self._take_assignment(wanted)
        except BaseException:
            if self._pending_assignment is None:
                self._pending_assignment = wanted  # try again on the next round
            raise
        if deferred:  # new partitions not started yet (the others run): asked for again later
            return self._start_retry.defer(self.spec.task_id, deferred)
        self._start_retry.reset()
        if self._pending_assignment == wanted:
            self._pending_assignment = None
            self._assignment_applied.set()

    async def _take_assignment(self, wanted: tuple[TopicPartition, ...]) -> list[TopicPartition]:
        pos = self._pos
        removed = [tp for tp in pos if tp not in wanted]
        if removed:
            # the next owner starts from the committed position: make it this task's last one
            await self.committer.settle()  # an older snapshot must not land after this one
            await self.committer.write(snapshot(pos.acked, pos.target_next, removed, pos.topic_ids))
        for tp in removed:
            pos.drop(tp)
            self.planner.reset(tp)
            self.refusals.drop(tp)
        new = [tp for tp in wanted if tp not in pos]
        if not new:
            return []
        seeded = {tp: self._seeds.pop(tp) for tp in new if tp in self._seeds}
        starts = await resolve_starts(
            new, seeded=seeded, given=dict(self.spec.start_positions or {}), progress=self.progress,
            source=self.source, sink=self.sink, commit=self.committer.write, reconcile=self.reconcile,
        )
        self.metrics.skipped_on_resume += starts.skipped
        syncs = [s for tp, already in starts.already.items() for d in already for s in self.planner.on_batch(
            tp, d.source_first, d.source_last, d.target_first, d.record_offsets)]
        if syncs:  # the batches found on the target past the committed positions
            self.metrics.syncs += len(syncs)
            self.progress.send_syncs(syncs)
        for tp, (expected, found) in starts.target_truncated.items():
            if self.verify and (alarm := self.losses.target_acked(tp, expected, found)) is not None:
                raise alarm  # before anything is produced to it
        for tp, (start, target, topic_id) in starts.positions.items():
            pos.start(tp, start, target, topic_id)
        # the incarnations the stored positions are in: another one now is a re-created topic
        self.source.expect_topic_ids(
            {tp.topic: i for tp, (_, _, i) in starts.positions.items() if i is not None})
        log.info("task %s: now mirroring %d partitions", self.spec.task_id, len(pos))
        return starts.deferred
