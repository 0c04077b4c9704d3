"""A mirror task: the runtime-agnostic pipeline fetch → produce → offset syncs → progress.

A task's work is plain data (:class:`TaskSpec`, picklable) so that any runtime can run it, for
good (:meth:`TaskRunner.run`) or up to given offsets (:meth:`TaskRunner.run_until`); how each
runtime does is in ``docs/architecture.md``. The concrete source and sink (raw fetch / raw
produce) come from ``connectors/`` through the :class:`BatchSource` and :class:`BatchSink`.

Invariants kept here:
- per partition, batches are handed to the sink in source order, and the sink appends them in that
  order across puts (a put is handed over before earlier ones are acknowledged: ``engine/puts.py``);
- a position is committed only once every batch below it is acknowledged (at-least-once);
- the sink re-sends what it must by itself; a failure it reports leaves each partition at an
  acknowledged prefix. If the target holds exactly that prefix, fetching restarts from the last
  acknowledged position (nothing skipped); if it may hold more (``SinkError.restart``), the task
  fails, and its restart resumes from what the target holds (nothing twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from mm2py.engine.committer import Committer, snapshot
from mm2py.engine.idle_check import IdleCheck
from mm2py.engine.latency import observe_acks, observe_fetch
from mm2py.engine.losses import Alarm, LossWatch, MirrorAlarmError, Policy
from mm2py.engine.offset_syncs import OffsetSyncPlanner
from mm2py.engine.puts import Put, PutQueue, Wakeup, cancel_fetch
from mm2py.engine.refusals import PartitionRefusals, describe, hold_refused, rest_failed, waiting_status
from mm2py.engine.scheduler import sleep_or_stop
from mm2py.engine.task_assignment import Reassignment
from mm2py.engine.task_contract import (
    THROTTLE_KEY,
    BatchSink,
    BatchSource,
    Polled,
    ProgressKeeper,
    Reconciler,
    SinkError,
    TaskMetrics,
    TaskSpec,
    TaskState,
)
from mm2py.engine.task_positions import TaskPositions
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.mm2_records import OffsetSync
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

log = logging.getLogger(__name__)

#: a fetch under way (the loop's prefetch)
Fetch = asyncio.Task[dict[TopicPartition, Polled]]


class TaskRunner:
    """Runs one task's partitions until stopped (in process; a Spark lease) or to given offsets (a round)."""

    def __init__(
        self,
        spec: TaskSpec,
        source: BatchSource,
        sink: BatchSink,
        progress: ProgressKeeper,
        *,
        offset_lag_max: int = 100,
        commit_interval: float = 1.0,
        retry_backoff: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        reconcile: Reconciler | None = None,
        wall_clock: Callable[[], float] = time.time,
        pipeline_depth: int = 3,
        alarms: Mapping[Alarm, Policy] | None = None,
        verify: bool = True,
        idle_check_interval: float | None = None,
    ) -> None:
        """``idle_check_interval``: how often the idle partitions' remote ends are asked for
        (engine/idle_check.py; None: never)."""
        self.spec = spec
        self.source = source
        self.sink = sink
        self.progress = progress
        self.planner = OffsetSyncPlanner(offset_lag_max=offset_lag_max)
        self.commit_interval = commit_interval
        self.retry_backoff = retry_backoff
        #: partitions resting after a failed put, and those the target refuses (engine/refusals.py)
        self.refusals = PartitionRefusals(retry_backoff)
        #: fetches handed to the sink and not yet acknowledged, at most (memory vs. a full window)
        self.pipeline_depth = pipeline_depth
        self.clock = clock
        self.wall_clock = wall_clock  # compared with record timestamps (latency, record age)
        self.reconcile = reconcile
        self.metrics = TaskMetrics()
        self.committer = Committer(progress, self.metrics, commit_interval, clock, str(spec.task_id))
        self.losses = LossWatch(str(spec.task_id), self.metrics, alarms, wall_clock)
        #: each acknowledged batch's target offset compared with where the last one ended (the
        #: target.* alarms, ``verified_batches``); off only to measure what it costs
        #: (``mm2py.verify.enabled``)
        self.verify = verify
        self.idle_check = IdleCheck(idle_check_interval, clock)  # foreign writes while idle
        self.state = TaskState.UNASSIGNED
        self.trace: str | None = None
        self._pos = TaskPositions()  # where the task stands in each partition: their one owner
        #: the assignment waiting to be taken, its seeds, the pace of deferred starts: its one owner
        self.reassignment = Reassignment(
            spec, self._pos, progress=progress, reconcile=reconcile, planner=self.planner,
            refusals=self.refusals, committer=self.committer, metrics=self.metrics, losses=self.losses,
            clock=clock)

    # -- assignment (what waits to be taken: :class:`Reassignment`) ----------------------------
    @property
    def partitions(self) -> tuple[TopicPartition, ...]:
        return tuple(sorted(self._pos))

    def positions(self) -> dict[TopicPartition, int]:
        """Acknowledged positions (next source offset not yet on the target)."""
        return dict(self._pos.acked)

    @property
    def assignment(self) -> tuple[TopicPartition, ...]:
        """The partitions this task is to mirror (an assignment not yet taken included)."""
        return self.reassignment.assignment(self.partitions)

    def committed_positions(self) -> dict[TopicPartition, Position]:
        """Each partition's acknowledged position with the target end it maps to."""
        pos = self._pos
        return snapshot(pos.acked, pos.target_next, pos.acked, pos.topic_ids)

    def seed(self, positions: Mapping[TopicPartition, Position]) -> None:
        """Start these partitions, when assigned, exactly at ``positions`` (a clean hand-over)."""
        self.reassignment.seed(positions)

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Change the assignment; partitions kept keep their positions (no restart)."""
        self.reassignment.assign(partitions)

    async def release(self, keep: Sequence[TopicPartition], timeout: float = 60.0) -> bool:
        """Give up every partition not in ``keep``; wait until the task no longer produces them and
        has committed their positions (another task takes over). False if not within ``timeout``."""
        self.assign([tp for tp in self.partitions if tp in set(keep)])
        # not running: nothing is producing; the next owner resumes from the last commit
        return self.state == TaskState.RUNNING and await self.reassignment.wait_applied(timeout)

    # -- main loop -----------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        self.state = TaskState.RUNNING
        try:
            await self._loop(stop, until=None)
        except Exception as exc:
            self.state = TaskState.FAILED
            self.trace = f"{type(exc).__name__}: {exc}"
            log.exception("task %s failed", self.spec.task_id)
            raise
        finally:
            with contextlib.suppress(Exception):
                await self._commit(force=True)
        self.state = TaskState.STOPPED

    async def run_until(
        self, until: Mapping[TopicPartition, int], timeout: float = 600
    ) -> dict[TopicPartition, int]:
        """Mirror the assigned partitions up to (at least) ``until``; commit; return positions."""
        self.state = TaskState.RUNNING
        stop = asyncio.Event()
        await asyncio.wait_for(self._loop(stop, until=dict(until)), timeout)
        await self._commit(force=True)
        self.state = TaskState.STOPPED
        return self.positions()

    async def _loop(self, stop: asyncio.Event, until: dict[TopicPartition, int] | None) -> None:
        prefetch: Fetch | None = None
        puts = PutQueue(self.sink, self._settle)
        wakeup = Wakeup(stop)
        try:
            while not stop.is_set():
                if puts and self.reassignment.due():
                    if not await puts.settle_all():  # the new owner starts from settled positions
                        prefetch = await self._recover(prefetch, stop)
                    continue
                try:
                    await self.reassignment.apply(self.source, self.sink, verify=self.verify)
                except MirrorAlarmError:
                    raise  # an alarm under 'fail' at the start (target.truncated): not retried
                except Exception as exc:  # e.g. the source or the target is unreachable right now
                    log.warning("task %s: taking the new assignment failed (%s); retrying",
                                self.spec.task_id, exc)
                    await sleep_or_stop(stop, self.retry_backoff * 4)
                    continue
                if until is not None and self._reached(until) and not puts:
                    return
                wanted = self._wanted(until)
                if not wanted and not puts and prefetch is None:  # nothing under way: no partition
                    self._check_idle()  # yet, or those left wait for a deferred start or rest
                    await sleep_or_stop(stop, 0.2)
                    continue
                # fetch the next round while earlier ones are being produced (up to the depth)
                if prefetch is None and wanted and len(puts) < self.pipeline_depth:
                    prefetch = asyncio.create_task(self.source.poll(wanted))
                # the periodic commit is due on time even when neither the fetch nor a put moves
                if not await wakeup.until_any(prefetch, puts.head(), self.committer.due_in()):
                    break  # stopped
                if not puts.settle_ready():
                    await puts.settle_all()  # the failed partitions' later batches failed too
                    prefetch = await self._recover(prefetch, stop)
                    continue
                if prefetch is not None and prefetch.done():
                    polled = prefetch.result()
                    prefetch = None
                    work, ends = self._advance(polled)
                    if work:
                        prefetch = await self._fetch_ahead(until, len(puts) + 1)
                        puts.submit(work, ends)
                await self._commit(force=False)
                self._check_idle()
            await puts.settle_all()  # stopped: what was handed over counts before the last commit
        except Exception:
            # failed (a corrupt batch, say): what was handed over lands anyway; settle it first
            with contextlib.suppress(Exception):
                await puts.settle_all()
            raise
        finally:
            wakeup.close()
            self.idle_check.close()
            await cancel_fetch(prefetch)

    async def _fetch_ahead(
        self, until: dict[TopicPartition, int] | None, puts: int
    ) -> Fetch | None:
        """The next fetch, sent now (``puts``: the puts there will be once this round's is
        submitted): the source broker reads and sends it while this round's batches are prepared
        (coalescing and compression run on this thread). None if the pipeline is full or nothing
        is wanted; the loop then starts it later, as usual."""
        wanted = self._wanted(until)
        if not wanted or puts >= self.pipeline_depth:
            return None
        fetch = asyncio.create_task(self.source.poll(wanted))
        await asyncio.sleep(0)  # the fetch task's first step writes the request
        return fetch

    def _reached(self, until: dict[TopicPartition, int]) -> bool:
        pos = self._pos
        if (unassigned := [tp for tp in until if tp not in pos]) and self.reassignment.pending is None:
            raise ValueError(f"task {self.spec.task_id} does not mirror {unassigned}")
        acked = pos.acked
        return all(acked.get(tp, 0) >= o for tp, o in until.items())

    def _wanted(self, until: dict[TopicPartition, int] | None) -> dict[TopicPartition, int]:
        wanted = self._pos.wanted(until)
        if self.refusals:  # ONE_PARTITION_WAITS: a resting partition is left out, the others not
            for tp in self.refusals.resting(self.clock()):
                wanted.pop(tp, None)
        return wanted

    def _advance(
        self, polled: Mapping[TopicPartition, Polled]
    ) -> tuple[list[tuple[TopicPartition, list[RecordBatch]]], dict[TopicPartition, int]]:
        """The batches of a fetch to hand to the sink, by partition, and each such partition's fetch
        position after them (a put's ``ends``: past filtered batches at the end of the round)."""
        work, ends, pos = [], {}, self._pos
        for tp, p in polled.items():
            if tp not in pos:
                continue  # unassigned meanwhile
            fetch = pos.fetch_of(tp)
            if p.fetch_offset is not None and p.fetch_offset != fetch:
                continue  # fetched for an older position (unassigned and assigned again meanwhile)
            if p.reset_to is not None and (p.reset_to != fetch or p.recreated):
                self.losses.source_reset(tp, fetch, p.reset_to, p.recreated)  # or raises
                if pos.reset(tp, p.reset_to, p.topic_id):
                    self.planner.reset(tp)
                continue
            batches = p.batches
            if p.topic_id is not None:
                pos.learn_topic_id(tp, p.topic_id)
            if p.fetch_offset is None:  # a source that does not say where it fetched from
                batches = [b for b in batches if b.next_offset > fetch]
            if p.high_watermark >= 0:
                self.metrics.lag[tp] = max(0, p.high_watermark - p.next_offset)
            observe_fetch(self.metrics.times, tp, batches, p.high_watermark > p.next_offset,
                          self.wall_clock())
            if batches:
                work.append((tp, batches))
                ends[tp] = pos.fetched(tp, p.next_offset)
            else:  # only filtered batches (aborted, control): nothing to produce, position moves on
                pos.skip_filtered(tp, p.next_offset)
        return work, ends

    async def _recover(self, prefetch: Fetch | None, stop: asyncio.Event) -> Fetch | None:
        """A put failed and all are settled: rewind, drop the fetch under way, back off (the
        failed partitions alone, when the failure named them)."""
        self._rewind()
        await cancel_fetch(prefetch)
        if not self.refusals:
            await sleep_or_stop(stop, self.retry_backoff)
        return None

    def _rewind(self) -> None:
        """After a failed put (and every later one) was settled, the target holding exactly what
        was acknowledged: fetch again from there, and let the sink produce the failed partitions."""
        self._pos.rewind()
        for tp in self._pos:
            self.planner.reset(tp)
        self.sink.recover()

    def _settle(self, put: Put) -> bool:
        """Positions, metrics and offset syncs for what ``put`` delivered; False if it failed."""
        try:
            delivered = put.pending.result()
            ok, failure = True, None
        except SinkError as exc:
            delivered, ok, failure = exc.delivered, False, exc
            self.metrics.sink_failures += 1
            if exc.restart or not rest_failed(self.refusals, exc.causes, self._pos, self.clock(),
                                              self.wall_clock(), self.spec.task_id):
                then = ("failing the task, whose restart reads what the target holds" if exc.restart
                        else "retrying from the last acknowledged batch")
                # the log throttle folds repeats of one cause on one partition only (``throttle``)
                log.warning("task %s: produce failed, %s: %s", self.spec.task_id, then, exc,
                            extra={THROTTLE_KEY: exc.kind})
        observe_acks(self.metrics.times, [(d.source, d.max_timestamp) for d in delivered], self.wall_clock())
        syncs: list[OffsetSync] = []
        pos, verified, alarm, verify = self._pos, 0, None, self.verify
        refusing = self.refusals.refused
        for d in delivered:
            if d.source not in pos:
                continue
            if refusing and (was := self.refusals.taken(d.source)) is not None:
                log.info("task %s: %s taken by the target again after %d refusals (%s): mirroring it "
                         "from offset %d", self.spec.task_id, was.target, was.refusals,
                         describe(was.code)[0], d.source_first)
            expected = pos.acknowledge(d.source, d.source_next, d.target_first, d.records)
            if verify:
                if expected == d.target_first:  # where the last batch ended
                    verified += 1
                else:  # an alarm under 'fail' is raised once this acknowledgement is accounted for
                    alarm = self.losses.target_acked(d.source, expected, d.target_first) or alarm
            self.metrics.batches += 1
            self.metrics.records += d.records
            self.metrics.bytes += d.size
            if d.record_offsets is not None:
                self.metrics.rebuilt_batches += 1
            if d.split:
                self.metrics.split_batches += 1
            syncs.extend(self.planner.on_batch(
                d.source, d.source_first, d.source_last, d.target_first, d.record_offsets
            ))
        # a filtered stretch (aborted or control batches) after a partition's last delivered batch
        if ok:
            for tp, batches in put.work:
                if (end := put.ends.get(tp)) is not None and tp in pos:
                    pos.pass_filtered(tp, batches[-1].next_offset, end)
        self.metrics.audit_verified_batches += verified
        for refused in failure.refused if failure is not None else ():
            hold_refused(refused, self._pos, self.losses)
        if syncs:
            self.metrics.syncs += len(syncs)
            self.progress.send_syncs(syncs)
        if failure is not None and failure.restart:  # the restart reads what the target holds
            raise failure
        if alarm is not None:
            raise alarm
        return ok

    @property
    def refused_partitions(self) -> list[dict[str, object]]:
        """The partitions the target refuses, each with its cause, what to change, and its retry."""
        return self.refusals.status(self.clock())

    @property
    def waiting_for_target(self) -> list[dict[str, object]]:
        """Partitions with too few in-sync replicas and brokers throttling the task (a quota)."""
        return waiting_status(self.refusals, self.clock(), getattr(self.sink, "throttles", None))

    @property
    def held_partitions(self) -> list[str]:
        """The partitions held at a record the target refuses (``target.too.large`` under ``fail``)."""
        return sorted(str(tp) for tp in self._pos.held)

    def _check_idle(self) -> None:
        if (alarm := self.idle_check.step(self._pos, self.sink, self.losses)) is not None:
            raise alarm  # target.foreign (or truncated) under fail, found on an idle partition

    async def _commit(self, force: bool) -> None:
        throttles = getattr(self.sink, "throttles", None)  # the sink's throttling so far (THROTTLED)
        self.metrics.target_throttle_ms = throttles.total_ms if throttles is not None else 0
        if force:  # now, every partition (snapshotted on the event loop); raises if it failed
            await self.committer.now(self.committed_positions)
        else:  # in the background when due: what moved since the last periodic commit
            pos = self._pos
            await self.committer.maybe(pos.acked, pos.target_next, pos.topic_ids)

    async def close(self) -> None:
        await self.committer.settle()
        await self.source.close()
        await self.sink.close()
        await asyncio.to_thread(self.progress.close)
