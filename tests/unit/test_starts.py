"""Where new partitions start (``mm2py.engine.starts``): the round trips it needs go out together."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from mm2py.engine.starts import resolve_starts
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition

OLD, NEW = TopicPartition("t", 0), TopicPartition("t", 1)


class SlowProgress:
    """The progress topic's reader: OLD was mirrored before. Its read finishes only once the
    target's end offsets were asked for, so a caller that asks one after the other never ends."""

    def __init__(self) -> None:
        self.asked = threading.Event()

    def load(self) -> dict[TopicPartition, Position]:
        assert self.asked.wait(5), "the end offsets were not asked for while the progress was read"
        return {OLD: Position(40, 400)}


async def test_the_progress_and_the_new_partitions_offsets_are_read_at_once() -> None:
    progress = SlowProgress()
    committed: list[Mapping[TopicPartition, Position]] = []

    class Source:
        async def resolve_start(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
            return {tp: 7 for tp in partitions}

    class Sink:
        async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
            progress.asked.set()
            await asyncio.sleep(0)
            return {tp: 70 for tp in partitions}

    async def commit(seeds: Mapping[TopicPartition, Position]) -> None:
        committed.append(dict(seeds))

    starts = await asyncio.wait_for(resolve_starts(
        [OLD, NEW], seeded={}, given={}, progress=progress, source=Source(),  # type: ignore[arg-type]
        sink=Sink(), commit=commit, reconcile=None,  # type: ignore[arg-type]
    ), 10)
    assert starts.positions == {OLD: Position(40, 400), NEW: Position(7, 70)}
    assert committed == [{NEW: Position(7, 70)}], "only the partition never mirrored is seeded"


async def test_the_tail_reconciler_gets_the_target_ends_read_with_the_others() -> None:
    """A resumed partition's target end is the one read for every new partition at once: the
    reconciler asks nothing of its own (one ListOffsets for a lease's hundreds of partitions, not
    one each); a partition whose end could not be had then is left to the reconciler to ask."""
    gone = TopicPartition("t", 2)
    asked: list[list[TopicPartition]] = []
    reconciled: dict[TopicPartition, int | None] = {}

    class Progress:
        def load(self) -> dict[TopicPartition, Position]:
            return {OLD: Position(40, 400), gone: Position(5, 50)}

    class Source:
        async def resolve_start(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
            return {tp: 7 for tp in partitions}

    class Sink:
        async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
            asked.append(sorted(partitions))
            return {tp: 403 if tp == OLD else 70 for tp in partitions if tp != gone}

    async def reconcile(tp: TopicPartition, stored: Position,
                        end: int | None) -> tuple[Position, list[object]]:
        reconciled[tp] = end
        return (Position(43, 403) if tp == OLD else stored), []

    async def commit(seeds: Mapping[TopicPartition, Position]) -> None:
        pass

    starts = await resolve_starts(
        [OLD, NEW, gone], seeded={}, given={}, progress=Progress(), source=Source(),  # type: ignore[arg-type]
        sink=Sink(), commit=commit, reconcile=reconcile,  # type: ignore[arg-type]
    )
    assert asked == [sorted([OLD, NEW, gone])]  # once, for all of them
    assert reconciled == {OLD: 403, gone: None}
    assert starts.positions[OLD] == Position(43, 403) and starts.skipped == 3


async def test_tails_are_reconciled_many_at_once_but_no_more_than_the_bound() -> None:
    """Each reconcile reads the target and the source (round trips to remote clusters): they run
    RECONCILE_AT_ONCE at a time, each partition getting its own result; the first failure ends
    the start with that error and nothing of the others runs on."""
    from mm2py.engine.starts import RECONCILE_AT_ONCE

    parts = [TopicPartition("t", p) for p in range(3 * RECONCILE_AT_ONCE)]
    running, most = 0, 0
    fail_at: list[int] = []
    finished: list[TopicPartition] = []

    class Progress:
        def load(self) -> dict[TopicPartition, Position]:
            return {tp: Position(tp.partition, 10 * tp.partition) for tp in parts}

    class Source:
        async def resolve_start(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
            return {}

    class Sink:
        async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
            return {tp: 10 * tp.partition + 1 for tp in partitions}

    async def reconcile(tp: TopicPartition, stored: Position,
                        end: int | None) -> tuple[Position, list[object]]:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            await asyncio.sleep(0.01)  # its round trips
            if tp.partition in fail_at:
                raise ConnectionError(f"target gone while reading {tp}")
            await asyncio.sleep(0.01)
        finally:
            running -= 1
        finished.append(tp)
        return Position(stored.source + 1, end), []

    async def commit(seeds: Mapping[TopicPartition, Position]) -> None:
        pass

    def start() -> Any:
        return resolve_starts(parts, seeded={}, given={}, progress=Progress(),  # type: ignore[arg-type]
                              source=Source(), sink=Sink(), commit=commit,  # type: ignore[arg-type]
                              reconcile=reconcile)  # type: ignore[arg-type]

    starts = await start()
    assert most == RECONCILE_AT_ONCE
    assert starts.positions == {tp: Position(tp.partition + 1, 10 * tp.partition + 1) for tp in parts}
    assert list(starts.positions) == parts  # in the partitions' order
    fail_at.append(0)
    finished.clear()
    with pytest.raises(ConnectionError, match="target gone"):
        await start()
    await asyncio.sleep(0.1)  # any reconcile left running would finish meanwhile
    assert len(finished) < RECONCILE_AT_ONCE and running == 0
