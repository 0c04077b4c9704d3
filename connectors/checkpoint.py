"""MirrorCheckpoint for one flow: checkpoints of source consumer groups, and group offset sync.

Like MirrorMaker 2's MirrorCheckpointConnector/Task, for a flow ``source->target`` it

* lists the source's consumer groups that ``groups`` / ``groups.exclude`` select, every
  ``refresh.groups.interval.seconds``;
* every ``emit.checkpoints.interval.seconds`` reads their committed offsets on the source, keeps
  the partitions of topics the flow mirrors, translates them (see ``mm2py.engine.checkpoints``) and
  writes the changed ones as MM2 ``Checkpoint`` records to ``<source>.checkpoints.internal`` on the
  target (compacted, one partition), naming the renamed target topic;
* with ``sync.group.offsets.enabled``, every ``sync.group.offsets.interval.seconds`` commits the
  latest checkpoints to the same groups on the target — only groups without members there, and
  never moving a partition's committed offset backwards;
* with ``sync.group.offsets.enabled`` and ``mm2py.sync.group.offsets.live`` (the default), also
  checkpoints and syncs each source commit as soon as the mirror has passed it, and a new group at
  its first commit (:mod:`mm2py.connectors.live_sync`); the intervals above are upper bounds then.

Its view of the offset syncs, of the mirror's committed progress and of earlier checkpoints is kept
by following those topics (``TopicTail``): each is read from the start once, then incrementally.
Errors (a cluster unreachable...) are logged and the work is retried at the next interval. The jobs
and the live steps take turns (one lock): the connector's bookkeeping is touched by one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import Producer

from mm2py.config.models import FlowConfig
from mm2py.config.security import Side
from mm2py.connectors.live_sync import LiveGroupSync
from mm2py.engine.checkpoints import CheckpointLog, offsets_to_sync, translate_group
from mm2py.engine.controller import Controller
from mm2py.engine.latency import Histogram
from mm2py.engine.live_groups import AcknowledgedView
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.engine.scheduler import Job, Scheduler
from mm2py.engine.sync_history import SyncHistory
from mm2py.engine.task_contract import TaskState
from mm2py.protocol.connect_offsets import Position, ProgressFold, progress_topic
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.mm2_records import Checkpoint, HistorySync, OffsetSync
from mm2py.protocol.partitioner import JAVA_PARTITIONER
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin, GroupOffsetsRefusedError, librdkafka_config
from mm2py.stores.topic_tail import TopicTail

log = logging.getLogger(__name__)

_RETRY_SECONDS = 5.0


@dataclass
class CheckpointMetrics:
    checkpoints_emitted: int = 0
    group_syncs: int = 0  # offset commits made to target groups
    offsets_synced: int = 0  # partitions committed by those
    skipped_active_groups: int = 0  # sync rounds that left a group alone because it had members
    failures: int = 0
    groups: int = 0  # source groups currently selected
    last_error: str | None = None
    #: per group: from reading its offsets on the source to its checkpoints acknowledged on the
    #: target (MM2's checkpoint-latency-ms, measured the same way)
    latency: dict[str, Histogram] = field(default_factory=dict)
    #: live sync: a source commit (its coordinator's timestamp) to its offset committed on the target
    sync_latency: Histogram = field(default_factory=Histogram)


def mirror_rule(
    flow: FlowConfig, source_admin: ClusterAdmin, target_admin: ClusterAdmin
) -> tuple[Callable[[str], bool], Callable[[str], str]]:
    """(does the flow mirror this source topic?, its target name), by the controller's own rule."""
    ctl = Controller(
        flow.source, flow.target, source_admin, target_admin,
        topic_filter=flow.topic_filter(), policy=flow.replication_policy(),
        replicate_heartbeats=flow.heartbeats_replication_enabled,
    )
    return ctl.should_replicate, ctl.target_topic


class CheckpointConnector:
    def __init__(
        self, flow: FlowConfig, *,
        mirrored: Callable[[str], bool] | None = None, rename: Callable[[str], str] | None = None,
        acknowledged: AcknowledgedView | None = None,
    ) -> None:
        """``acknowledged``: what the flow's tasks in this process had acknowledged (in-process
        runtime), for the live sync's translation without waiting for their progress commits."""
        self.flow = flow
        self.source_admin = ClusterAdmin.for_cluster(flow, "source")
        self.target_admin = ClusterAdmin.for_cluster(flow, "target")
        if mirrored is None or rename is None:
            mirrored, rename = mirror_rule(flow, self.source_admin, self.target_admin)
        self.mirrored, self.rename = mirrored, rename
        self.topic = flow.checkpoints_topic()
        self.group_filter = flow.group_filter()
        # offsets before the oldest sync compaction left on the offset-syncs topic: the sync history's
        self.history = SyncHistory()
        self.syncs = OffsetSyncStore(older=self.history.syncs)
        self._progress = ProgressFold(flow.source, flow.connector_name, 0)  # sized at its first read
        self.latest = CheckpointLog()  # the latest checkpoint of each group's partitions
        syncs_side: Side = "source" if flow.offset_syncs_cluster == flow.source else "target"
        tag = f"checkpoints-{flow.source}-{flow.target}"
        self._syncs_tail = TopicTail(
            librdkafka_config(flow, syncs_side, "consumer"), flow.offset_syncs_topic(), self._on_sync,
            name=tag,
        )
        self._history_tail = TopicTail(
            librdkafka_config(flow, syncs_side, "consumer"), flow.offset_sync_history_topic(),
            self._on_history, name=tag,
        )
        self._progress_tail = TopicTail(
            librdkafka_config(flow, "target", "consumer"), progress_topic(flow.source),
            placed=self._on_progress, name=tag,
        )
        self._producer = Producer(
            # each key where MM2's producer puts it, should the topic have more than one partition
            librdkafka_config(flow, "target", "producer",
                              {"acks": "all", "linger.ms": 5, "partitioner": JAVA_PARTITIONER})
        )
        self.groups: list[str] = []
        self.metrics = CheckpointMetrics()
        self.state = TaskState.UNASSIGNED
        self._loaded = False
        self.live: LiveGroupSync | None = None
        if self.syncs_groups and flow.sync_group_offsets_live:
            self.live = LiveGroupSync(self, acknowledged)
        self._turns = asyncio.Lock()  # the jobs and the live steps, one at a time

    # -- configuration ---------------------------------------------------------------------------
    @staticmethod
    def wanted(flow: FlowConfig) -> bool:
        """Does ``flow`` need this connector (it emits checkpoints or syncs group offsets)?"""
        return _emits(flow) or _syncs_groups(flow)

    @classmethod
    def for_flow(
        cls, flow: FlowConfig, controller: Controller, acknowledged: AcknowledgedView | None = None
    ) -> CheckpointConnector | None:
        """The connector of a running flow, deciding what is mirrored as its controller does; None
        when the flow neither emits checkpoints nor syncs group offsets."""
        if not cls.wanted(flow):
            return None
        return cls(flow, mirrored=controller.should_replicate, rename=controller.target_topic,
                   acknowledged=acknowledged)

    @property
    def emits(self) -> bool:
        return _emits(self.flow)

    @property
    def syncs_groups(self) -> bool:
        return _syncs_groups(self.flow)

    # -- topic followers -------------------------------------------------------------------------
    def _on_sync(self, key: bytes | None, value: bytes | None) -> None:
        try:
            self.syncs.add(OffsetSync.from_record(key, value))
        except ProtocolError as exc:
            log.warning("%s: ignoring a malformed offset sync: %s", self.flow.name, exc)

    def _on_history(self, key: bytes | None, value: bytes | None) -> None:
        try:
            self.history.add(HistorySync.from_record(key, value))
        except ProtocolError as exc:
            log.warning("%s: ignoring a malformed sync history record: %s", self.flow.name, exc)

    @property
    def progress(self) -> Mapping[TopicPartition, Position]:
        """The flow's committed positions, as the progress topic holds them."""
        return self._progress.resolved

    def _on_progress(self, partition: int, timestamp: int, key: bytes | None, value: bytes | None) -> None:
        self._progress.offer(partition, timestamp, key, value)  # folded once caught up

    def _fold_progress(self) -> None:
        self._progress.partitions = self._progress_tail.partitions
        for exc in self._progress.settle():
            log.warning("%s: ignoring a malformed progress record: %s", self.flow.name, exc)

    def _on_checkpoint(self, key: bytes | None, value: bytes | None) -> None:
        try:
            self.latest.add(Checkpoint.from_record(key, value))
        except ProtocolError as exc:
            log.warning("%s: ignoring a malformed checkpoint: %s", self.flow.name, exc)

    # -- the three jobs (blocking; run in a thread) ----------------------------------------------
    def _load(self) -> None:
        """Create the checkpoints topic; read the checkpoints written before (once)."""
        if self.emits:
            rf = self.flow.checkpoints_topic_replication_factor
            self.target_admin.ensure_compacted_topic(self.topic, rf)
        tail = TopicTail(librdkafka_config(self.flow, "target", "consumer"), self.topic, self._on_checkpoint,
                         name=f"checkpoints-loader-{self.flow.source}-{self.flow.target}")
        try:
            tail.catch_up(self.source_admin.timeout)
        finally:
            tail.close()
        self._loaded = True

    def refresh_groups(self) -> list[str]:
        groups = [g for g in self.source_admin.list_groups() if self.group_filter.should_replicate(g)]
        if groups != self.groups:
            log.info("%s: checkpointing %d consumer groups", self.flow.name, len(groups))
        self.groups = groups
        self.metrics.groups = len(groups)
        return groups

    def add_group(self, group: str) -> None:
        """A selected group seen committing before the group list names it (live sync)."""
        if group not in self.groups:
            self.groups = sorted([*self.groups, group])
            self.metrics.groups = len(self.groups)
            log.info("%s: new consumer group %s, checkpointing %d groups", self.flow.name, group,
                     len(self.groups))

    def catch_up_topics(self) -> bool:
        """Read what was appended to the progress topic, then to the offset syncs (every sync below a
        committed position was flushed before it was committed); False with no offset syncs yet."""
        timeout = self.source_admin.timeout
        self._progress_tail.catch_up(timeout)
        self._fold_progress()
        return self._syncs_tail.catch_up(timeout)

    def checkpoint_round(self, write: bool = True) -> list[Checkpoint]:
        """Translate the groups' offsets; record (and, if ``write``, emit) the changed checkpoints.
        With no group to translate the topics are not read (the first round with a group reads
        what was appended since: a mirror's progress commits are most of it, hundreds a second)."""
        if not self.groups or not self.catch_up_topics():
            return []  # no group, or no offset syncs yet: nothing to translate
        # for groups far behind (the live sync translates only what the mirror has just passed)
        self._history_tail.catch_up(self.source_admin.timeout)
        read_at = time.monotonic()
        offsets = self.source_admin.group_offsets(self.groups)
        changed: list[Checkpoint] = []
        for group, committed in offsets.items():
            cps = translate_group(
                group, committed, mirrored=self.mirrored, rename=self.rename,
                syncs=self.syncs, progress=self.progress,
            )
            changed.extend(self.latest.changed(cps.values()))
        if write and changed:
            self.write_checkpoints(changed)
            took = time.monotonic() - read_at
            for group in {cp.group for cp in changed}:
                self.metrics.latency.setdefault(group, Histogram()).observe(took)
        for cp in changed:
            self.latest.add(cp)
        return changed

    def write_checkpoints(self, checkpoints: list[Checkpoint]) -> None:
        errors: list[str] = []

        def on_delivery(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))

        for cp in checkpoints:
            self._producer.produce(
                self.topic, cp.value_bytes(), cp.key_bytes(), partition=0, on_delivery=on_delivery,
            )
        left = self._producer.flush(self.target_admin.timeout)
        if left or errors:
            raise RuntimeError(f"writing checkpoints to {self.topic} failed: {errors[:3] or left}")
        self.metrics.checkpoints_emitted += len(checkpoints)

    def sync_round(self) -> dict[str, int]:
        """Commit the latest checkpoints to inactive target groups; returns partitions per group."""
        if not self.emits:
            self.checkpoint_round(write=False)
        return self.sync_groups(self.groups)

    def sync_groups(self, groups: list[str]) -> dict[str, int]:
        """Commit the latest checkpoints of ``groups`` to those inactive on the target, partitions
        where they are ahead only; returns partitions per group synced."""
        wanted = {g: cps for g in groups if (cps := self.latest.get(g))}
        states = self.target_admin.group_states(wanted)
        idle = [g for g in wanted if states.get(g) is not None and states[g].inactive]
        self.metrics.skipped_active_groups += len(wanted) - len(idle)
        current = self.target_admin.group_offsets(idle)
        done: dict[str, int] = {}
        for group in idle:
            todo = offsets_to_sync(wanted[group], current.get(group, {}))
            if not todo:
                continue
            try:
                self.target_admin.alter_group_offsets(group, todo)
            except GroupOffsetsRefusedError as exc:  # a consumer joined meanwhile: try next time
                log.warning("%s: %s", self.flow.name, exc)
                self.metrics.skipped_active_groups += 1
                continue
            done[group] = len(todo)
            self.metrics.group_syncs += 1
            self.metrics.offsets_synced += len(todo)
        if done:
            log.log(logging.DEBUG if self.live else logging.INFO, "%s: synced offsets of %d groups on %s",
                    self.flow.name, len(done), self.flow.target)
        return done

    # -- the loop --------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Run the jobs on their intervals until ``stop`` is set; failures are retried next time."""
        self.state = TaskState.RUNNING
        jobs = Scheduler(self.flow.name, stop, on_failure=self._failed)
        try:
            if not self._loaded and not await jobs.until_done(
                "load checkpoints", _threaded(self._load), retry=_RETRY_SECONDS
            ):
                return
            live = None
            if self.live is not None:  # the feed's start first: no commit falls before the first round
                if not await jobs.until_done("start live group sync", _threaded(self.live.start),
                                             retry=_RETRY_SECONDS):
                    return
                live = asyncio.create_task(self.live.run(stop, self._turns))
            refresh = self._refresh_interval()
            if refresh is None:  # MM2: groups are listed once at start only
                jobs.once("refresh groups", self._job(self.refresh_groups), retry=_RETRY_SECONDS)
            else:
                jobs.every("refresh groups", refresh, self._job(self.refresh_groups))
            if self.emits:
                jobs.every("emit checkpoints", max(0.1, self.flow.emit_checkpoints_interval_seconds),
                           self._job(self.checkpoint_round))
            if self.syncs_groups:
                jobs.every("sync group offsets", max(0.1, self.flow.sync_group_offsets_interval_seconds),
                           self._job(self.sync_round))
            try:
                await jobs.run()
            finally:
                if live is not None:
                    if not stop.is_set():  # cancelled: the live steps go too
                        live.cancel()
                    await asyncio.gather(live, return_exceptions=True)
        finally:
            await asyncio.to_thread(self.close)
            self.state = TaskState.STOPPED

    def _job(self, job: Callable[[], object]) -> Job:
        """A blocking job run in a worker thread when it has its turn (live steps take turns too)."""
        async def run() -> object:
            async with self._turns:
                return await asyncio.to_thread(job)
        return run

    def _refresh_interval(self) -> float | None:
        interval = self.flow.refresh_groups_interval_seconds
        if not self.flow.refresh_groups_enabled or interval < 0:
            return None
        return max(0.1, float(interval))

    def _failed(self, job: str, exc: Exception) -> None:
        self.metrics.failures += 1
        self.metrics.last_error = f"{job}: {type(exc).__name__}: {exc}"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._producer.flush(10)
        if self.live is not None:
            with contextlib.suppress(Exception):
                self.live.close()
        for tail in (self._syncs_tail, self._history_tail, self._progress_tail):
            with contextlib.suppress(Exception):
                tail.close()

    def status(self) -> dict[str, object]:
        m = self.metrics
        return {
            "state": self.state, "groups": m.groups, "checkpoints_emitted": m.checkpoints_emitted,
            "group_syncs": m.group_syncs, "offsets_synced": m.offsets_synced,
            "skipped_active_groups": m.skipped_active_groups, "failures": m.failures,
            "last_error": m.last_error, "live": self.live.status() if self.live is not None else None,
        }


def _emits(flow: FlowConfig) -> bool:
    return flow.emit_checkpoints_enabled and flow.emit_checkpoints_interval_seconds >= 0


def _syncs_groups(flow: FlowConfig) -> bool:
    return flow.sync_group_offsets_enabled and flow.sync_group_offsets_interval_seconds >= 0


def _threaded(job: Callable[[], object]) -> Job:
    """A blocking job (admin calls, librdkafka) as a scheduler job run in a worker thread."""
    return functools.partial(asyncio.to_thread, job)
