"""The task loop's Wakeup: woken by its fetch, its oldest put or stop, without a task per sleep."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Awaitable, Callable

from mm2py.engine.puts import Put, Wakeup


class FakePending:
    """A PendingPut whose answer the test gives; counts callback registrations."""

    def __init__(self) -> None:
        self.answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.registrations = 0

    def done(self) -> bool:
        return self.answered.done()

    async def wait(self) -> None:
        await asyncio.shield(self.answered)

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        self.registrations += 1
        self.answered.add_done_callback(lambda _f: fn())

    def result(self) -> list[object]:
        return []


def _put(pending: FakePending) -> Put:
    return Put(pending, [], {})  # type: ignore[arg-type]


def _with_wakeup(test: Callable[[asyncio.Event, Wakeup], Awaitable[None]]) -> None:
    """Run ``test(stop, wakeup)`` on a fresh event loop; the Wakeup is closed after it."""

    async def main() -> None:
        stop = asyncio.Event()
        wakeup = Wakeup(stop)
        try:
            await test(stop, wakeup)
        finally:
            wakeup.close()

    asyncio.run(main())


async def _sleeps_until(wakeup: Wakeup, fetch: asyncio.Future[None] | None, put: Put | None,
                        wake: Callable[[], None]) -> bool:
    """``until_any`` sleeps until ``wake()`` is called; then its answer."""
    sleeper = asyncio.ensure_future(wakeup.until_any(fetch, put))
    await asyncio.sleep(0.01)
    assert not sleeper.done()  # nothing happened yet: it sleeps
    wake()
    return await asyncio.wait_for(sleeper, 1)


def _fetch_done_soon() -> asyncio.Future[None]:
    """A fetch that finishes 1 ms from now: while ``until_any`` sleeps on it."""
    loop = asyncio.get_running_loop()
    fetch: asyncio.Future[None] = loop.create_future()
    loop.call_later(0.001, fetch.set_result, None)
    return fetch


def test_a_finished_fetch_or_answered_put_wakes_it() -> None:
    async def test(stop: asyncio.Event, wakeup: Wakeup) -> None:
        loop = asyncio.get_running_loop()
        fetch: asyncio.Future[None] = loop.create_future()
        pending = FakePending()
        assert await _sleeps_until(wakeup, fetch, _put(pending), lambda: fetch.set_result(None)) is True
        # a new fetch, and the put answered
        fetch2: asyncio.Future[None] = loop.create_future()
        assert await _sleeps_until(wakeup, fetch2, _put(pending),
                                   lambda: pending.answered.set_result(None)) is True

    _with_wakeup(test)


def test_stop_wakes_it_and_it_says_so() -> None:
    async def test(stop: asyncio.Event, wakeup: Wakeup) -> None:
        assert await _sleeps_until(wakeup, None, None, stop.set) is False
        assert await wakeup.until_any(None, None) is False  # stopped already: at once

    _with_wakeup(test)


def test_one_registration_per_put_however_many_sleeps() -> None:
    """A put outlives many loop steps (fetches keep arriving): its callback is added once."""

    async def test(stop: asyncio.Event, wakeup: Wakeup) -> None:
        pending = FakePending()
        put = _put(pending)
        for _ in range(50):
            assert await asyncio.wait_for(wakeup.until_any(_fetch_done_soon(), put), 1) is True
        assert pending.registrations == 1
        later = FakePending()  # the new head put is watched too
        fetch: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        assert await _sleeps_until(wakeup, fetch, _put(later),
                                   lambda: later.answered.set_result(None)) is True
        assert later.registrations == 1

    _with_wakeup(test)


def test_it_keeps_no_finished_fetch_or_put_alive() -> None:
    """A done fetch holds the fetched buffers: once the loop has taken it, Wakeup must not keep it."""

    async def test(stop: asyncio.Event, wakeup: Wakeup) -> None:
        fetch = _fetch_done_soon()
        pending = FakePending()
        put = _put(pending)
        assert await asyncio.wait_for(wakeup.until_any(fetch, put), 1) is True
        pending.answered.set_result(None)
        await asyncio.sleep(0)  # the put's done-callbacks run
        refs = weakref.ref(fetch), weakref.ref(put)
        del fetch, put, pending
        gc.collect()
        assert [r() for r in refs] == [None, None]

    _with_wakeup(test)
