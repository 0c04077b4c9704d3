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

from mm2py.engine.task_contract import BatchSink, PendingPut
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

__all__ = ["Put", "PutQueue", "Wakeup", "cancel_fetch"]

Work = list[tuple[TopicPartition, list[RecordBatch]]]


@dataclass(frozen=True)
class Put:
    """A put handed to the sink and what settling it needs."""

    pending: PendingPut
    work: Work
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
        self._puts.append(Put(self._sink.submit(work), work, ends))

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


class Wakeup:
    """What the task loop sleeps on between steps: until its fetch is done, its oldest put is
    answered, or ``stop`` is set.

    One future per sleep, set by done-callbacks registered once per fetch and per put; the only
    helper task (the wait on ``stop``) lives as long as the loop. A loop step costs no task to
    create and cancel per source (the live path takes a few hundred steps a second). A callback of
    an older fetch or put may wake a later sleep early; the loop then finds nothing new and sleeps
    again.
    """

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop
        self._stopped = asyncio.ensure_future(stop.wait())
        self._stopped.add_done_callback(self._wake)
        #: the current sleep's future (None between sleeps)
        self._sleep: asyncio.Future[None] | None = None
        #: the fetch and the put whose completion will call _wake; dropped once done, so that a
        #: fetch's result (its buffers) is not kept alive here after the loop took it
        self._fetch: asyncio.Future[Any] | None = None
        self._put: Put | None = None

    def _wake(self, _done: object = None) -> None:
        sleep = self._sleep
        if sleep is not None and not sleep.done():
            sleep.set_result(None)

    def _fetch_done(self, fetch: asyncio.Future[Any]) -> None:
        if self._fetch is fetch:
            self._fetch = None
        self._wake()

    def _put_done(self, put: Put) -> None:
        if self._put is put:
            self._put = None
        self._wake()

    async def until_any(
        self, fetch: asyncio.Future[Any] | None, put: Put | None, timeout: float | None = None
    ) -> bool:
        """Until ``fetch`` is done, ``put`` answered or ``timeout`` seconds passed; False if
        ``stop`` is set (or was)."""
        if self._stop.is_set():
            return False
        if (fetch is not None and fetch.done()) or (put is not None and put.pending.done()):
            return True
        if fetch is not None and fetch is not self._fetch:  # not yet done (checked above)
            self._fetch = fetch
            fetch.add_done_callback(self._fetch_done)
        if put is not None and put is not self._put:
            self._put = put
            put.pending.add_done_callback(lambda: self._put_done(put))
        loop = asyncio.get_running_loop()
        self._sleep = loop.create_future()
        timer = loop.call_later(timeout, self._wake) if timeout is not None else None
        try:
            await self._sleep
        finally:
            self._sleep = None
            if timer is not None:
                timer.cancel()
        return not self._stop.is_set()

    def close(self) -> None:
        self._stopped.cancel()


async def cancel_fetch(task: asyncio.Task[Any] | None) -> None:
    """Cancel an outstanding fetch (its result is for positions no longer wanted)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
