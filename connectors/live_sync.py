"""Live group offset sync: a source group's commit reaches the target group as soon as it is mirrored.

MM2 reads every group's offsets every ``emit.checkpoints.interval.seconds`` (60 s) and commits the
checkpoints to the target every ``sync.group.offsets.interval.seconds`` (60 s), listing the groups
every ``refresh.groups.interval.seconds`` (600 s): a commit shows on the target half a minute to
two minutes later, a new group's after up to ten minutes. With ``sync.group.offsets.enabled`` and
``mm2py.sync.group.offsets.live`` (default true) the checkpoint connector of a flow also runs a
:class:`LiveGroupSync`, which works commit by commit:

1. **Learn of each commit.** It follows the source's ``__consumer_offsets`` topic
   (:class:`~mm2py.stores.commit_feed.ConsumerOffsetsFeed`; records decoded by
   ``mm2py/protocol/consumer_offsets.py``): a commit is read a few milliseconds after the source
   acknowledged it, and a group created after the flow started is seen at its first commit. The
   group filter (``groups``/``groups.exclude``) and the flow's topic rule apply as to every
   checkpoint. When the cluster refuses the topic (no DESCRIBE/READ), or with
   ``mm2py.sync.group.offsets.live.mode=poll``, it polls instead: the selected groups' offsets
   every ``mm2py.sync.group.offsets.live.poll.ms`` (500 ms; one OffsetFetch per group, sent
   together) and the group list every ten polls, and logs once why.
2. **Wait until it translates exactly** (``mm2py/engine/live_groups.py``): until the mirror has
   passed the committed offset, which under live traffic is milliseconds later, by the same
   translation as every checkpoint and ``mm2py offsets translate``. The in-process runtime hands
   over its tasks' acknowledged positions and offset syncs as they happen
   (:class:`~mm2py.engine.live_groups.AcknowledgedView`); otherwise (Spark) the progress and
   offset-syncs topics are read again, at most every 100 ms while a commit waits, so a commit waits
   for the task's next progress commit (``--commit-interval``, 1 s).
3. **Checkpoint, then sync**, by MM2's rules, as the periodic rounds do: a checkpoint whose
   downstream offset advanced (or whose upstream went back) is written to
   ``<source>.checkpoints.internal``; then the group's latest checkpoints are committed to the
   target group if it has no members there, only for partitions where they are ahead of what the
   group committed there. A group active on the target is never written to; a checkpoint is never
   behind what the target group has.

The periodic jobs keep running at their intervals (upper bounds now: they find nothing new unless a
commit could not be made exact within a minute, the mirror being stopped or far behind, or a member
left a target group) and share one lock with the live steps, so the connector's bookkeeping is only ever
touched by one of them at a time. A record the codec cannot read is logged (once a minute at most)
and counted; its group, if its key names one, is read with OffsetFetch instead; the loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from mm2py.config.filters import GroupFilter
from mm2py.config.models import FlowConfig
from mm2py.engine.checkpoints import CheckpointLog
from mm2py.engine.latency import Histogram
from mm2py.engine.live_groups import AcknowledgedView, Change, LiveGroups, MirrorView, TopicsView
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.engine.scheduler import sleep_or_stop
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.consumer_offsets import OffsetCommit, decode_record
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.mm2_records import Checkpoint
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin, librdkafka_config
from mm2py.stores.commit_feed import CommitFeedRefusedError, ConsumerOffsetsFeed, RawRecord

__all__ = ["Checkpointer", "LiveGroupSync"]


class LiveMetrics(Protocol):
    failures: int
    last_error: str | None
    sync_latency: Histogram


class Checkpointer(Protocol):
    """What the live sync uses of its flow's checkpoint connector (``connectors/checkpoint.py``)."""

    flow: FlowConfig
    group_filter: GroupFilter
    mirrored: Callable[[str], bool]
    rename: Callable[[str], str]
    source_admin: ClusterAdmin
    syncs: OffsetSyncStore
    latest: CheckpointLog
    groups: list[str]

    @property
    def metrics(self) -> LiveMetrics: ...
    @property
    def progress(self) -> Mapping[TopicPartition, Position]: ...
    @property
    def emits(self) -> bool: ...
    def add_group(self, group: str) -> None: ...
    def refresh_groups(self) -> list[str]: ...
    def catch_up_topics(self) -> bool: ...
    def write_checkpoints(self, checkpoints: list[Checkpoint]) -> None: ...
    def sync_groups(self, groups: list[str]) -> dict[str, int]: ...

log = logging.getLogger(__name__)

#: while a commit waits for the mirror: how long the feed waits for more records before trying again
_RETRY_S = 0.01
#: a commit waiting longer than this is retried less often (the mirror is behind)
_EAGER_S = 2.0
_LAZY_RETRY_S = 0.25
#: the progress and offset-syncs topics are read again at most this often while a commit waits
_TOPICS_EVERY_S = 0.1
#: a commit that cannot be made exact within this long is left to the periodic round
PATIENCE_S = 60.0
#: polling: the groups are listed every this many polls
_LIST_EVERY = 10
_IDLE_S = 0.5


class LiveGroupSync:
    """The live steps of one flow's checkpoint connector (see the module's docstring)."""

    def __init__(self, connector: Checkpointer, acknowledged: AcknowledgedView | None = None) -> None:
        self.cp = connector
        flow = connector.flow
        self.acknowledged = acknowledged
        self.live = LiveGroups(connector.group_filter.should_replicate, connector.mirrored, connector.rename,
                                patience=PATIENCE_S)
        self.mode = "poll" if flow.sync_group_offsets_live_mode == "poll" else "consumer-offsets"
        self.poll_interval = flow.sync_group_offsets_live_poll_ms / 1000
        self.feed: ConsumerOffsetsFeed | None = None
        if self.mode == "consumer-offsets":
            self.feed = ConsumerOffsetsFeed(librdkafka_config(flow, "source", "consumer"),
                                            name=f"live-sync-{flow.source}-{flow.target}")
        self.commits = 0  #: commits of selected groups on mirrored topics seen
        self.unreadable = 0  #: __consumer_offsets records the codec could not read
        self._polls = 0
        self._topics_read = 0.0
        self._last_warning = 0.0
        self._reread: set[str] = set()  # groups whose record could not be read: OffsetFetch them
        self._polled_at = 0.0
        #: checkpoints written whose group sync is still to be done (a failed step), per group
        self._unsynced: dict[str, list[Change]] = {}

    # -- start and loop ------------------------------------------------------------------------------
    def start(self) -> None:
        """Position the feed at the end of ``__consumer_offsets`` (blocking; before the periodic
        round reads the groups' offsets, so no commit falls between). Falls back to polling."""
        if self.feed is None:
            log.info("%s: live group offset sync polls the groups' offsets every %.0f ms "
                     "(mm2py.sync.group.offsets.live.mode=poll)", self.cp.flow.name,
                     self.poll_interval * 1000)
            return
        try:
            self.feed.start(self.cp.source_admin.timeout)
        except CommitFeedRefusedError as exc:
            self._fall_back(exc)

    def _fall_back(self, exc: Exception) -> None:
        log.warning("%s: cannot follow __consumer_offsets on '%s' (%s): live group offset sync polls "
                    "the groups' offsets every %.0f ms instead (grant DESCRIBE and READ on the topic "
                    "__consumer_offsets to follow it)", self.cp.flow.name, self.cp.flow.source, exc,
                    self.poll_interval * 1000)
        self.mode = "poll"
        if self.feed is not None:
            with contextlib.suppress(Exception):
                self.feed.close()
        self.feed = None

    async def run(self, stop: asyncio.Event, lock: asyncio.Lock) -> None:
        """Live steps until ``stop`` is set; a failed step is logged and the next one tries again."""
        while not stop.is_set():
            try:
                records = await self._next(stop)
                async with lock:
                    await self.step(records)
            except Exception as exc:
                self.cp.metrics.failures += 1
                self.cp.metrics.last_error = f"live group sync: {type(exc).__name__}: {exc}"
                log.warning("%s: live group sync failed: %s: %s", self.cp.flow.name, type(exc).__name__, exc)
                await sleep_or_stop(stop, 1.0)

    def _wait(self) -> float:
        newest = self.live.newest_wait()
        if newest is None:
            return _IDLE_S
        return _RETRY_S if time.monotonic() - newest < _EAGER_S else _LAZY_RETRY_S

    async def _next(self, stop: asyncio.Event) -> list[RawRecord]:
        if self.feed is not None:
            feed = self.feed
            try:
                return await asyncio.to_thread(feed.poll, self._wait())
            except CommitFeedRefusedError as exc:
                self._fall_back(exc)
                return []
        await sleep_or_stop(stop, min(self._wait(), self.poll_interval))
        return []

    # -- one step --------------------------------------------------------------------------------------
    async def step(self, records: list[RawRecord]) -> None:
        """Take ``records``; checkpoint and sync whatever became exact (under the connector's lock)."""
        now = time.monotonic()
        for _partition, _offset, key, value in records:
            self._offer(key, value, now)
        if self.feed is None:
            await self._poll(now)
        elif self._reread:
            groups, self._reread = sorted(self._reread), set()
            await self._read_groups(groups, now)
        if not self.live.pending:
            await self._sync()  # what a failed step left
            return
        ready = self.live.ready(self._views(), now)
        if self.live.pending and now - self._topics_read >= _TOPICS_EVERY_S:
            self._topics_read = now
            if await asyncio.to_thread(self.cp.catch_up_topics):
                ready += self.live.ready([TopicsView(self.cp.syncs, self.cp.progress)], now)
        await self._publish(ready)

    def _views(self) -> list[MirrorView]:
        views: list[MirrorView] = []
        if self.acknowledged is not None:
            views.append(self.acknowledged.snapshot())
        views.append(TopicsView(self.cp.syncs, self.cp.progress))
        return views

    def _offer(self, key: bytes | None, value: bytes | None, now: float) -> None:
        try:
            record = decode_record(key, value)
        except ProtocolError as exc:
            self.unreadable += 1
            group = _group_of(key)
            if group is not None and self.live.selected(group):
                self._reread.add(group)
            if now - self._last_warning >= 60:
                self._last_warning = now
                log.warning("%s: a __consumer_offsets record could not be read (%d so far; %s): %s",
                            self.cp.flow.name, self.unreadable,
                            f"group {group} is read with OffsetFetch" if group else "skipped", exc)
            return
        if isinstance(record, OffsetCommit) and record.value is not None:
            self.commits += self.live.selected(record.group)
        if (group := self.live.offer(record, now)) is not None:
            self.cp.add_group(group)

    async def _poll(self, now: float) -> None:
        """The fallback: every poll interval, the groups' offsets (and every ten, the group list)."""
        if self._polls and now - self._polled_at < self.poll_interval:
            return
        self._polled_at = now
        if self._polls % _LIST_EVERY == 0:
            await asyncio.to_thread(self.cp.refresh_groups)
        self._polls += 1
        await self._read_groups(list(self.cp.groups), now)

    async def _read_groups(self, groups: list[str], now: float) -> None:
        if not groups:
            return
        offsets = await asyncio.to_thread(self.cp.source_admin.group_offsets, groups)
        wall_ms = int(time.time() * 1000)
        for group, committed in offsets.items():
            if self.live.offer_offsets(group, committed, now, wall_ms):
                self.cp.add_group(group)

    async def _publish(self, ready: list[tuple[Checkpoint, Change]]) -> None:
        """Write the checkpoints that changed, then commit the groups' latest to the target. A failed
        write puts the commits back to wait; a failed sync is tried again at the next step."""
        changed = self.cp.latest.changed([cp for cp, _ in ready])
        if changed:
            try:
                if self.cp.emits:
                    await asyncio.to_thread(self.cp.write_checkpoints, changed)
            except Exception:
                self.live.restore([change for _, change in ready])
                raise
            for cp in changed:
                self.cp.latest.add(cp)
            moved = set(changed)
            for cp, change in ready:
                if cp in moved:
                    self._unsynced.setdefault(cp.group, []).append(change)
        await self._sync()

    async def _sync(self) -> None:
        if not self._unsynced:
            return
        done = await asyncio.to_thread(self.cp.sync_groups, sorted(self._unsynced))
        synced, self._unsynced = self._unsynced, {}  # groups left alone (active there...): as MM2
        wall_ms = time.time() * 1000
        for group, changes in synced.items():
            for change in changes if group in done else ():
                if change.commit_ms > 0:
                    self.cp.metrics.sync_latency.observe((wall_ms - change.commit_ms) / 1000)

    def close(self) -> None:
        if self.feed is not None:
            self.feed.close()
            self.feed = None

    def status(self) -> dict[str, object]:
        return {"mode": self.mode, "commits": self.commits, "waiting": len(self.live.pending),
                "left_to_periodic": self.live.given_up, "unreadable_records": self.unreadable}


def _group_of(key: bytes | None) -> str | None:
    """The group a ``__consumer_offsets`` key names, when the key alone can be read."""
    try:
        record = decode_record(key, None)
    except ProtocolError:
        return None
    return record.group if isinstance(record, OffsetCommit) else None
