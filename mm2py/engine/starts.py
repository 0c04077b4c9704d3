"""Where a task starts the partitions it is newly assigned.

In order of precedence, a partition starts at:

1. the position its previous holder handed over (Spark leases: a clean hand-over, trusted as is);
2. the position the task's spec gives (Spark rounds);
3. its committed progress, moved past what the target already holds (the tail reconciler: batches
   acknowledged after the last commit are not produced again); a target that now ends below the
   committed target end (truncated, or deleted and created again while no task ran) is reported in
   ``Starts.target_truncated`` for the task's alarm;
4. for a partition never mirrored: the source's earliest offset (or latest, per the flow), with the
   target end it maps to committed *before* anything is produced, so a worker killed before its
   first periodic commit still resumes exactly.

A partition never mirrored whose source or target offsets cannot be had now (a just-created
target partition whose leader is not ready) is *deferred*: it gets no start and no seed now, the
others start, and the task asks for it again later.

The progress topic is read only when some partition needs it, and the source's and the target's
offsets are asked for together. The target ends read then go to the tail reconciler too: one
ListOffsets for all, where a request per partition, one after the other, took seconds for the
hundreds of partitions of a lease that replaced a lost one. The partitions whose target holds
batches past their committed position are reconciled ``RECONCILE_AT_ONCE`` at a time (each reads
the target and the source: with a remote cluster's round trip, one after the other is seconds).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from mm2py.engine.task_contract import BatchSink, BatchSource, Delivered, ProgressKeeper, Reconciler
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition
from mm2py.retry import Backoff

__all__ = ["RECONCILE_AT_ONCE", "Starts", "resolve_starts"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: how many partitions' tails are reconciled at once
RECONCILE_AT_ONCE = 32


@dataclass
class Starts:
    """Where each new partition starts: the source position, the target end it maps to (None
    when unknown: a position given by the spec) and the source topic id it was stored with."""

    positions: dict[TopicPartition, Position] = field(default_factory=dict)
    #: partitions whose target now ends below the committed target end: (committed, found)
    target_truncated: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    #: batches the tail reconciler found on the target past a committed position (their offset
    #: syncs are still to be planned)
    already: dict[TopicPartition, Sequence[Delivered]] = field(default_factory=dict)
    #: source offsets found on the target past committed positions, over all partitions
    skipped: int = 0
    #: partitions never mirrored whose offsets could not be had now: not started
    deferred: list[TopicPartition] = field(default_factory=list)


async def resolve_starts(
    new: Sequence[TopicPartition],
    *,
    seeded: Mapping[TopicPartition, Position],
    given: Mapping[TopicPartition, int],
    progress: ProgressKeeper,
    source: BatchSource,
    sink: BatchSink,
    commit: Callable[[Mapping[TopicPartition, Position]], Awaitable[None]],
    reconcile: Reconciler | None,
) -> Starts:
    """The starts of ``new`` partitions (see the module's precedence); ``commit`` writes the
    seeds of partitions never mirrored before."""
    unknown = [tp for tp in new if tp not in given and tp not in seeded]
    stored: Mapping[TopicPartition, Position] = {}
    fresh: Mapping[TopicPartition, int] = {}
    targets: Mapping[TopicPartition, int] = {}
    if unknown:
        # the offsets a partition never mirrored starts from are asked for while the progress is
        # read (round trips at once, not one after another); the others' are not used
        load = asyncio.to_thread(progress.load) if not given else _nothing()
        stored, fresh, targets = await asyncio.gather(
            load, source.resolve_start(unknown), sink.end_offsets(unknown))
    out = Starts()
    missing = [tp for tp in unknown if tp not in stored]
    out.deferred = [tp for tp in missing if tp not in fresh or tp not in targets]
    seeds = {tp: Position(fresh[tp], targets[tp]) for tp in missing if tp not in out.deferred}
    if seeds:
        await commit(seeds)
    resumed = [tp for tp in unknown if tp in stored]  # none deferred: those are the unstored
    tails = dict(zip(resumed, await _at_most(RECONCILE_AT_ONCE, [
        functools.partial(_resumed, tp, stored[tp], targets.get(tp), reconcile, out) for tp in resumed]),
        strict=True))
    for tp in new:
        if tp in out.deferred:
            continue
        if tp in seeded:
            out.positions[tp] = seeded[tp]
        elif tp in given:
            out.positions[tp] = Position(given[tp], None)
        elif tp in stored:
            out.positions[tp] = tails[tp]
        else:
            out.positions[tp] = Position(fresh[tp], targets[tp])
    return out


async def _at_most(limit: int, calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """``calls``' results in their order, at most ``limit`` of them running at once; the first
    failure is raised and the others are cancelled (those not begun never are)."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    tasks = [asyncio.ensure_future(one(c)) for c in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        raise


async def _resumed(
    tp: TopicPartition, committed: Position, end: int | None, reconcile: Reconciler | None, out: Starts
) -> Position:
    if committed.target is None or reconcile is None:
        return committed
    resumed, already = await reconcile(tp, committed, end)
    if resumed.target is not None and resumed.target < committed.target:
        out.target_truncated[tp] = (committed.target, resumed.target)
    if resumed.source != committed.source:
        log.info("%s: offsets %d..%d were already on the target; resuming at %d",
                 tp, committed.source, resumed.source - 1, resumed.source)
        out.skipped += resumed.source - committed.source
    if already:
        out.already[tp] = already
    return Position(resumed.source, resumed.target, committed.topic_id)


async def _nothing() -> Mapping[TopicPartition, Position]:
    return {}


class StartRetry:
    """When a task asks again for the partitions whose start was deferred: ``first`` seconds
    after the attempt that deferred them, twice as long after each further one, at most
    ``longest``; each deferral is logged with the partitions it concerns."""

    def __init__(self, clock: Callable[[], float], first: float = 0.2, longest: float = 5.0) -> None:
        self.clock = clock
        #: the delays between the asks (counted from the first deferral since the last reset)
        self.backoff = Backoff(first, longest)
        self._due = float("-inf")

    def due(self) -> bool:
        return self.clock() >= self._due

    def defer(self, task: object, partitions: Sequence[TopicPartition]) -> None:
        delay = self.backoff.next_delay()
        self._due = self.clock() + delay
        log.info("task %s: %d new partitions wait for their leaders, e.g. %s; the others started; "
                 "asking again in %.1fs", task, len(partitions), ", ".join(map(str, partitions[:3])),
                 delay)

    def reset(self) -> None:
        self.backoff.reset()
        self._due = float("-inf")
