"""A task's puts: fetch results handed to the sink, settled strictly in the order they were handed.

The mirror loop (:class:`mm2py.engine.task.TaskRunner`) hands each fetch result to the sink as soon
as it arrives and goes on fetching; the sink keeps every partition's batches in order across puts.
:class:`PutQueue` holds the puts not yet settled: a put is settled (positions, offset syncs,
latency) only once it is answered *and* every earlier put is settled, so positions only ever move
over acknowledged batches.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mm2py.engine.task_api import BatchSink, PendingPut
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

__all__ = ["Put", "PutQueue", "cancel_fetch", "wait_any"]

Work = list[tuple[TopicPartition, list[RecordBatch]]]


@dataclass(frozen=True)
class Put:
    """A put handed to the sink and what settling it needs."""

    pending: PendingPut
    work: Work
    #: (partition, last offset) -> max timestamp of each batch (replication latency)
    stamps: dict[tuple[TopicPartition, int], int]
    #: partition -> the fetch position after this put's fetch (past filtered batches)
    ends: dict[TopicPartition, int]


class PutQueue:
    """Puts not yet settled, oldest first; ``settle(put)`` returns False for a failed put."""

    def __init__(self, sink: BatchSink, settle: Callable[[Put], bool]) -> None:
        self._sink = sink
        self._settle = settle
        self._puts: deque[Put] = deque()

    def __len__(self) -> int:
        return len(self._puts)

    def head(self) -> Put | None:
        return self._puts[0] if self._puts else None

    def submit(self, work: Work, ends: dict[TopicPartition, int]) -> None:
        stamps = {(tp, b.last_offset): b.max_timestamp for tp, batches in work for b in batches}
        self._puts.append(Put(self._sink.submit(work), work, stamps, ends))

    def settle_ready(self) -> bool:
        """Settle the answered puts at the head; False at the first failed one."""
        while self._puts and self._puts[0].pending.done():
            if not self._settle(self._puts.popleft()):
                return False
        return True

    async def settle_all(self) -> bool:
        """Wait for and settle every put, in order; False if one failed."""
        ok = True
        while self._puts:
            await self._puts[0].pending.wait()
            ok = self._settle(self._puts.popleft()) and ok
        return ok


async def wait_any(fetch: asyncio.Task[Any] | None, put: Put | None, stop: asyncio.Event) -> bool:
    """Until ``fetch`` is done or ``put`` answered; False if ``stop`` was set first."""
    helpers: list[asyncio.Future[Any]] = [asyncio.ensure_future(stop.wait())]
    if put is not None:
        helpers.append(asyncio.ensure_future(put.pending.wait()))
    waits: set[asyncio.Future[Any]] = set(helpers)
    if fetch is not None:
        waits.add(fetch)
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for f in helpers:
            f.cancel()
    return not stop.is_set()


async def cancel_fetch(task: asyncio.Task[Any] | None) -> None:
    """Cancel an outstanding fetch (its result is for positions no longer wanted)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
