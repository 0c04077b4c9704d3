"""A mirror task's changes of assignment: which partitions it mirrors, and where each new one starts.

:class:`Reassignment` is a collaborator a :class:`~mm2py.engine.task.TaskRunner` holds: it owns the
assignment waiting to be taken, the seeds handed over for it and the pace of deferred starts, and
takes a new assignment between two rounds of the task's loop: partitions given up are committed for
their next owner first, new ones start where :func:`~mm2py.engine.starts.resolve_starts` says; a
remote partition found ending below its committed target end is ``target.truncated`` before
anything is produced to it, and the source topic ids the stored positions were written with go to
the source, which reports a topic created again since (``engine/losses.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence

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
)
from mm2py.engine.task_positions import TaskPositions
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition

__all__ = ["Reassignment"]

log = logging.getLogger("mm2py.engine.task")


class Reassignment:
    """The assignment a task is to take, and the taking of it (the task's loop calls :meth:`apply`).

    It owns :attr:`pending`, :attr:`applied`, :attr:`start_retry` and :attr:`seeds`: nothing else
    writes them. The task's positions, committer, offset-sync planner and refusals are the task's;
    this object is handed them to drop the partitions given up and start the new ones. The source
    and the sink are handed to :meth:`apply` on each call (a runtime may wrap the task's sink after
    the task is built)."""

    def __init__(
        self,
        spec: TaskSpec,
        positions: TaskPositions,
        *,
        progress: ProgressKeeper,
        reconcile: Reconciler | None,
        planner: OffsetSyncPlanner,
        refusals: PartitionRefusals,
        committer: Committer,
        metrics: TaskMetrics,
        losses: LossWatch,
        clock: Callable[[], float],
    ) -> None:
        #: the task: its id in the logs, the start positions it was given
        self.spec = spec
        #: the task's positions (the task owns them); partitions are dropped and started only here
        self.positions = positions
        #: where the committed positions are read from, and the offset syncs of a start sent to
        self.progress = progress
        #: the target's tail read past a committed position (None: the committed one is trusted)
        self.reconcile = reconcile
        #: the task's offset-sync planner: a partition given up is forgotten there
        self.planner = planner
        #: the task's resting partitions: a partition given up is forgotten there
        self.refusals = refusals
        #: the task's progress writer: a partition given up is committed for its next owner first
        self.committer = committer
        #: the task's figures (``skipped_on_resume``, ``syncs``)
        self.metrics = metrics
        #: the task's alarms (``target.truncated`` at a start)
        self.losses = losses
        #: guards against taking the same assignment twice: the partitions to mirror once taken,
        #: None once the last one given was taken in full; written by :meth:`assign` and
        #: :meth:`apply` only
        self.pending: tuple[TopicPartition, ...] | None = spec.partitions
        #: set once :attr:`pending` is taken in full; what :meth:`wait_applied` (a release) awaits
        self.applied = asyncio.Event()
        #: paces new partitions whose start was deferred (no leader yet): an apply is due only then
        self.start_retry = StartRetry(clock)
        #: positions handed over by the previous holder of a partition (Spark leases): trusted as
        #: they are, so the partition needs neither the progress topic nor the tail reconciler;
        #: each used once, when its partition starts
        self.seeds: dict[TopicPartition, Position] = {}

    def assignment(self, current: tuple[TopicPartition, ...]) -> tuple[TopicPartition, ...]:
        """The partitions the task is to mirror: ``current`` unless an assignment waits."""
        return current if self.pending is None else tuple(self.pending)

    def due(self) -> bool:
        """True if an assignment waits and may be taken now (deferred starts wait their turn)."""
        return self.pending is not None and self.start_retry.due()

    def seed(self, positions: Mapping[TopicPartition, Position]) -> None:
        """Start these partitions, when assigned, exactly at ``positions`` (a clean hand-over)."""
        self.seeds.update(positions)

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Change the assignment; partitions kept keep their positions (no restart)."""
        self.pending = tuple(partitions)
        self.applied.clear()
        self.start_retry.reset()  # a new assignment is taken at once, deferred starts or not

    async def wait_applied(self, timeout: float) -> bool:
        """True once the assignment given last is taken in full; False if not within ``timeout``."""
        try:
            await asyncio.wait_for(self.applied.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def apply(self, source: BatchSource, sink: BatchSink, *, verify: bool) -> None:
        """Take the waiting assignment, if one is due (``verify``: the ``target.*`` alarms on)."""
        wanted = self.pending
        if wanted is None or not self.start_retry.due():
            return
        try:
            deferred = await self._take(wanted, source, sink, verify)
        except BaseException:
            if self.pending is None:
                self.pending = wanted  # try again on the next round
            raise
        if deferred:  # new partitions not started yet (the others run): asked for again later
            return self.start_retry.defer(self.spec.task_id, deferred)
        self.start_retry.reset()
        if self.pending == wanted:
            self.pending = None
            self.applied.set()

    async def _take(
        self, wanted: tuple[TopicPartition, ...], source: BatchSource, sink: BatchSink, verify: bool
    ) -> list[TopicPartition]:
        pos = self.positions
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
        seeded = {tp: self.seeds.pop(tp) for tp in new if tp in self.seeds}
        starts = await resolve_starts(
            new, seeded=seeded, given=dict(self.spec.start_positions or {}), progress=self.progress,
            source=source, sink=sink, commit=self.committer.write, reconcile=self.reconcile,
        )
        self.metrics.skipped_on_resume += starts.skipped
        syncs = [s for tp, already in starts.already.items() for d in already for s in self.planner.on_batch(
            tp, d.source_first, d.source_last, d.target_first, d.record_offsets)]
        if syncs:  # the batches found on the target past the committed positions
            self.metrics.syncs += len(syncs)
            self.progress.send_syncs(syncs)
        for tp, (expected, found) in starts.target_truncated.items():
            if verify and (alarm := self.losses.target_acked(tp, expected, found)) is not None:
                raise alarm  # before anything is produced to it
        for tp, (start, target, topic_id) in starts.positions.items():
            pos.start(tp, start, target, topic_id)
        # the incarnations the stored positions are in: another one now is a re-created topic
        source.expect_topic_ids(
            {tp.topic: i for tp, (_, _, i) in starts.positions.items() if i is not None})
        log.info("task %s: now mirroring %d partitions", self.spec.task_id, len(pos))
        return starts.deferred
