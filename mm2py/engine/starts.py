"""Where a task starts the partitions it is newly assigned.

In order of precedence, a partition starts at:

1. the position its previous holder handed over (Spark leases: a clean hand-over, trusted as is);
2. the position the task's spec gives (Spark rounds);
3. its committed progress, moved past what the target already holds (the tail reconciler: batches
   acknowledged after the last commit are not produced again);
4. for a partition never mirrored: the source's earliest offset (or latest, per the flow), with the
   target end it maps to committed *before* anything is produced, so a worker killed before its
   first periodic commit still resumes exactly.

The progress topic is read only when some partition needs it, and the source's and the target's
offsets are asked for together.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from mm2py.engine.task_api import BatchSink, BatchSource, Delivered, ProgressKeeper, Reconciler
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition

__all__ = ["Starts", "resolve_starts"]

log = logging.getLogger(__name__)


@dataclass
class Starts:
    """Where each new partition starts: the source position and the target end it maps to (None
    when unknown: a position given by the spec)."""

    positions: dict[TopicPartition, tuple[int, int | None]] = field(default_factory=dict)
    #: batches the tail reconciler found on the target past a committed position (their offset
    #: syncs are still to be planned)
    already: dict[TopicPartition, Sequence[Delivered]] = field(default_factory=dict)
    #: source offsets found on the target past committed positions, over all partitions
    skipped: int = 0


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
    missing = [tp for tp in unknown if tp not in stored]
    if missing:
        await commit({tp: Position(fresh.get(tp, 0), targets[tp]) for tp in missing})
    out = Starts()
    for tp in new:
        if tp in seeded:
            out.positions[tp] = seeded[tp]
        elif tp in given:
            out.positions[tp] = (given[tp], None)
        elif tp in stored:
            out.positions[tp] = await _resumed(tp, stored[tp], reconcile, out)
        else:
            out.positions[tp] = (fresh.get(tp, 0), targets[tp])
    return out


async def _resumed(
    tp: TopicPartition, committed: Position, reconcile: Reconciler | None, out: Starts
) -> tuple[int, int | None]:
    if committed.target is None or reconcile is None:
        return committed.source, committed.target
    resumed, already = await reconcile(tp, committed)
    if resumed.source != committed.source:
        log.info("%s: offsets %d..%d were already on the target; resuming at %d",
                 tp, committed.source, resumed.source - 1, resumed.source)
        out.skipped += resumed.source - committed.source
    if already:
        out.already[tp] = already
    return resumed.source, resumed.target


async def _nothing() -> Mapping[TopicPartition, Position]:
    return {}
