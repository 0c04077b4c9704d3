"""SessionKeeper (client/reauth.py): requests held during a re-authentication leave in the order
they were made, also the one made just as the gate opens (a produce batch that reaches the broker
before the one before it is refused as if the broker forgot our producer, and the producer then
re-sent batches already appended under a new producer id: duplicates)."""

from __future__ import annotations

import asyncio

from mm2py.client.reauth import SessionKeeper


async def test_requests_held_by_a_reauthentication_leave_in_the_order_they_were_made() -> None:
    loop = asyncio.get_running_loop()
    written: list[str] = []
    release = asyncio.Event()
    late: list[asyncio.Task[None]] = []

    async def request(name: str) -> None:
        await keeper.wait()
        written.append(name)  # the connection writes its request right after wait() returns

    async def authenticate() -> int | None:
        await release.wait()
        # a request made in the same turn as the gate opens (the producer's pump, woken by a
        # caller): it runs before the held ones wake up
        late.append(loop.create_task(request("late")))
        return None

    keeper = SessionKeeper("conn", "c", authenticate, lambda _exc: None)
    keeper._begin()  # a re-authentication starts between requests
    held = [loop.create_task(request(name)) for name in ("first", "second", "third")]
    await asyncio.sleep(0.01)
    assert written == []
    release.set()
    await asyncio.gather(*held)
    await asyncio.gather(*late)
    assert written == ["first", "second", "third", "late"]


async def test_a_held_request_cancelled_keeps_the_others_in_order() -> None:
    loop = asyncio.get_running_loop()
    written: list[str] = []
    release = asyncio.Event()

    async def request(name: str) -> None:
        await keeper.wait()
        written.append(name)

    async def authenticate() -> int | None:
        await release.wait()
        return None

    keeper = SessionKeeper("conn", "c", authenticate, lambda _exc: None)
    keeper._begin()
    a, b, c = (loop.create_task(request(name)) for name in "abc")
    await asyncio.sleep(0.01)
    b.cancel()
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(a, c)
    assert written == ["a", "c"]
    # and with no re-authentication under way, a request goes at once
    await asyncio.wait_for(request("d"), 0.1)
    assert written[-1] == "d"


async def test_the_session_is_counted_from_when_the_authentication_began() -> None:
    """The broker's session starts when it reads our SaslAuthenticate, before its answer reaches
    us: a session counted from the answer would end after the broker's by the time that took."""
    loop = asyncio.get_running_loop()
    keeper = SessionKeeper("conn", "c", lambda: asyncio.sleep(0, None), lambda _exc: None)
    began = loop.time() - 0.7  # the exchange took 0.7 s (a busy event loop)
    keeper.started(4_000, began)
    try:
        assert keeper.session_end == began + 4.0
        assert keeper._timer is not None
        # 85-95% of 4 s would leave 0.2-0.6 s; a second is kept for a request behind a long poll
        assert keeper._timer.when() == began + 3.0
    finally:
        keeper.lost(by_client=True)
    keeper.started(0, loop.time())
    assert keeper.session_end is None and keeper._timer is None
