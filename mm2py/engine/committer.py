"""When and how a task writes its progress: the :class:`Committer` of one :class:`TaskRunner`.

Invariants it keeps:

- **SYNCS_BEFORE_PROGRESS**: every write flushes the offset syncs sent so far before it commits the
  positions, so a committed position never runs ahead of the syncs that translate it.
- **MONOTONIC**: writes are serialised and a forced write waits for the periodic one under way, so
  an older snapshot never lands after a newer one.
- **NO_STALL**: a periodic commit runs beside the mirror loop (a slow target must not hold up the
  next produce); at most one is under way, and a failed one is retried at the next interval.
- **NOTHING_DROPPED**: a periodic commit writes only the partitions that moved since the one
  before (:class:`MovedSince`); what a failed one held is written with the next one, under the
  newer position where a partition moved again.
- **ON_THE_GRID**: periodic commits fall due at the multiples of the interval on the clock, not an
  interval after the task's own last one: the tasks of a process (same clock, same interval)
  commit together, and a shared progress producer sends their records as one request per
  progress partition (``stores/positions.py``: ``ProgressProducer``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterable, Mapping

from mm2py.engine.task_contract import ProgressKeeper, TaskMetrics
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.fetch_session import changed_keys
from mm2py.protocol.types import TopicPartition

__all__ = ["Committer", "MovedSince"]

log = logging.getLogger(__name__)


class Committer:
    def __init__(self, progress: ProgressKeeper, metrics: TaskMetrics, interval: float,
                 clock: Callable[[], float], name: str) -> None:
        self.progress = progress
        self.metrics = metrics
        self.interval = interval
        self.clock = clock
        self.name = name  # for log lines
        self._due = self._next_due(clock())  # ON_THE_GRID
        self._periodic: asyncio.Task[None] | None = None  # guards NO_STALL: the one under way
        self._writing = asyncio.Lock()  # guards MONOTONIC
        #: NOTHING_DROPPED: positions of a periodic commit that failed, written with the next one
        self._unwritten: dict[TopicPartition, Position] = {}
        self._moved = MovedSince()

    async def maybe(
        self, acked: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int | None],
        topic_ids: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        """When one is due and none is under way, start a periodic commit of the partitions whose
        position (``acked``) or target end (``ends``) moved since the last."""
        now = self.clock()
        if now < self._due:
            return
        if self._periodic is not None and not self._periodic.done():
            return  # the previous one is slow (target busy): the next interval catches up
        self._due = self._next_due(now)
        moved = snapshot(acked, ends, self._moved.take(acked, ends), topic_ids)
        if moved or self._unwritten:
            self._periodic = asyncio.create_task(self._in_background(moved))

    def due_in(self) -> float | None:
        """Seconds until :meth:`maybe` will start the next periodic commit (the task's loop
        wakes then even if nothing else happens); None while one is under way."""
        if self._periodic is not None and not self._periodic.done():
            return None
        return max(0.001, self._due - self.clock())

    def _next_due(self, now: float) -> float:
        """ON_THE_GRID: the first multiple of the interval after ``now``."""
        return (math.floor(now / self.interval) + 1) * self.interval if self.interval > 0 else now

    async def now(self, snapshot: Callable[[], Mapping[TopicPartition, Position]]) -> None:
        """Commit ``snapshot()`` now (after the periodic one under way); raises if it failed."""
        await self.settle()
        self._due = self._next_due(self.clock())
        await self.write(snapshot())
        self._unwritten.clear()  # the snapshot had every partition
        self.metrics.commits += 1

    async def _in_background(self, moved: Mapping[TopicPartition, Position]) -> None:
        positions, self._unwritten = ({**self._unwritten, **moved}, {}) if self._unwritten else (moved, {})
        try:
            await self.write(positions)
        except Exception as exc:
            # the target is unreachable for now: keep mirroring, commit again next interval
            for tp, pos in positions.items():  # NOTHING_DROPPED (a newer snapshot's value wins)
                self._unwritten.setdefault(tp, pos)
            self.metrics.commit_failures += 1
            log.warning("task %s: committing progress failed (%s); will retry", self.name, exc)
            return
        self.metrics.commits += 1

    async def settle(self) -> None:
        """Wait for the periodic commit under way, if any (it never raises)."""
        if self._periodic is not None:
            await asyncio.gather(self._periodic, return_exceptions=True)
            self._periodic = None

    async def write(self, positions: Mapping[TopicPartition, Position]) -> None:
        """``positions`` (snapshotted on the event loop), written in a thread, one write at a time."""
        async with self._writing:
            await asyncio.to_thread(self._persist, positions)

    def _persist(self, positions: Mapping[TopicPartition, Position]) -> None:
        self.progress.flush_syncs()  # SYNCS_BEFORE_PROGRESS
        self.progress.commit(positions)


class MovedSince:
    """The partitions whose position or target end moved since the last :meth:`take` (every
    partition the first time and whenever the partitions changed): a periodic commit snapshots
    those only, compared at C speed (a task of thousands of partitions of which a few moved)."""

    def __init__(self) -> None:
        self._acked: dict[TopicPartition, int] | None = None
        self._ends: dict[TopicPartition, int | None] = {}

    def take(self, acked: Mapping[TopicPartition, int],
             ends: Mapping[TopicPartition, int | None]) -> Iterable[TopicPartition]:
        before, ends_before = self._acked, self._ends
        self._acked, self._ends = dict(acked), dict(ends)
        if before is not None:
            moved, moved_ends = changed_keys(acked, before), changed_keys(ends, ends_before)
            if moved is not None and moved_ends is not None:
                return dict.fromkeys(moved + moved_ends) if moved_ends else moved
        return list(acked)


def snapshot(acked: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int | None],
             partitions: Iterable[TopicPartition], topic_ids: Mapping[TopicPartition, str] | None = None,
             ) -> dict[TopicPartition, Position]:
    """What to commit for ``partitions``: each one's position (``acked``), target end (``ends``) and
    source topic id (``topic_ids``, None where unknown), taken on the event loop (built at C speed:
    thousands)."""
    parts = list(partitions)
    ids = topic_ids if topic_ids is not None else {}
    # Position._make is tuple.__new__: no Python-level call per partition (half the time)
    triples = zip(map(acked.__getitem__, parts), map(ends.get, parts), map(ids.get, parts), strict=True)
    return dict(zip(parts, map(Position._make, triples), strict=True))
