"""The task loop's Wakeup: woken by its fetch, its oldest put or stop, without a task per sleep."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable

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
    return Put(pending, [], {}, {})  # type: ignore[arg-type]


def _run(coro_fn: Callable[[], object]) -> None:
    asyncio.run(coro_fn())  # type: ignore[arg-type]


def test_a_finished_fetch_or_answered_put_wakes_it() -> None:
    async def main() -> None:
        stop = asyncio.Event()
        wakeup = Wakeup(stop)
        loop = asyncio.get_running_loop()
        fetch: asyncio.Future[None] = loop.create_future()
        pending = FakePending()
        sleeper = asyncio.ensure_future(wakeup.until_any(fetch, _put(pending)))
        await asyncio.sleep(0.01)
        assert not sleeper.done()  # nothing happened yet: it sleeps
        fetch.set_result(None)
        assert await asyncio.wait_for(sleeper, 1) is True
        # the fetch is done: it returns at once; a new fetch and the answered put
        fetch2: asyncio.Future[None] = loop.create_future()
        sleeper = asyncio.ensure_future(wakeup.until_any(fetch2, _put(pending)))
        await asyncio.sleep(0.01)
        assert not sleeper.done()
        pending.answered.set_result(None)
        assert await asyncio.wait_for(sleeper, 1) is True
        wakeup.close()

    _run(main)


def test_stop_wakes_it_and_it_says_so() -> None:
    async def main() -> None:
        stop = asyncio.Event()
        wakeup = Wakeup(stop)
        sleeper = asyncio.ensure_future(wakeup.until_any(None, None))
        await asyncio.sleep(0.01)
        assert not sleeper.done()
        stop.set()
        assert await asyncio.wait_for(sleeper, 1) is False
        assert await wakeup.until_any(None, None) is False  # stopped already: at once
        wakeup.close()

    _run(main)


def test_one_registration_per_put_however_many_sleeps() -> None:
    """A put outlives many loop steps (fetches keep arriving): its callback is added once."""

    async def main() -> None:
        stop = asyncio.Event()
        wakeup = Wakeup(stop)
        loop = asyncio.get_running_loop()
        pending = FakePending()
        put = _put(pending)
        for _ in range(50):
            fetch: asyncio.Future[None] = loop.create_future()
            loop.call_later(0.001, fetch.set_result, None)  # done while it sleeps
            assert await asyncio.wait_for(wakeup.until_any(fetch, put), 1) is True
        assert pending.registrations == 1
        later = FakePending()
        fetch = loop.create_future()
        sleeper = asyncio.ensure_future(wakeup.until_any(fetch, _put(later)))
        await asyncio.sleep(0.01)
        later.answered.set_result(None)  # the new head put is watched too
        assert await asyncio.wait_for(sleeper, 1) is True
        assert later.registrations == 1
        wakeup.close()

    _run(main)


def test_it_keeps_no_finished_fetch_or_put_alive() -> None:
    """A done fetch holds the fetched buffers: once the loop has taken it, Wakeup must not keep it."""

    async def main() -> None:
        stop = asyncio.Event()
        wakeup = Wakeup(stop)
        loop = asyncio.get_running_loop()
        fetch: asyncio.Future[None] = loop.create_future()
        pending = FakePending()
        put = _put(pending)
        loop.call_later(0.001, fetch.set_result, None)
        assert await asyncio.wait_for(wakeup.until_any(fetch, put), 1) is True
        pending.answered.set_result(None)
        await asyncio.sleep(0)  # the put's done-callbacks run
        refs = weakref.ref(fetch), weakref.ref(put)
        del fetch, put, pending
        gc.collect()
        assert [r() for r in refs] == [None, None]
        wakeup.close()

    _run(main)
