"""The producer over a connection that re-authenticates (KIP-368) mid-window: nothing appended twice.

Found under load in test_oauth (a run of 31 records mirrored twice). a1 and a2 are handed to
``request()`` during a re-authentication and wait for its gate (``SessionKeeper``); a3, submitted
just as it ends, must not be written before them. Before the fix it was (its task found the gate
gone while the waiters were still waking up through ``asyncio.shield``): the broker refused a3 as
out of sequence, appended a1 and a2 under producer id 1, and the lane, taking the refusal for a
broker that forgot its producer id, re-sent a1..a3 under a new id: a1 and a2 twice.
"""

from __future__ import annotations

import asyncio

import pytest

from mm2py.client.cluster import ClusterClient
from mm2py.client.producer import RawProducer
from mm2py.client.reauth import SessionKeeper
from tests.support.fake_broker import A, FakeBroker, FakeConnection, batch

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path


class GatedConnection(FakeConnection):
    """The fake broker's connection with BrokerConnection.request's first line: wait for a
    re-authentication under way (the real SessionKeeper's gate)."""

    def __init__(self, broker: FakeBroker) -> None:
        super().__init__(broker)
        self.release = asyncio.Event()
        self.on_release = lambda: None
        self._session = SessionKeeper(f"fake#{self.number}", "", self._reauthenticate, lambda exc: None)

    async def _reauthenticate(self) -> int | None:
        await self.release.wait()  # SaslHandshake + SaslAuthenticate on the wire
        self.on_release()
        return None

    async def request(self, api_key, version, body, parser, timeout=None):  # type: ignore[no-untyped-def]
        await self._session.wait()  # as BrokerConnection.request
        return await super().request(api_key, version, body, parser, timeout)


class GatedFactory:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    async def connect(self, host: str, port: int, node_id: int = -1) -> GatedConnection:
        return GatedConnection(self.broker)


async def test_batches_held_by_a_reauthentication_go_out_before_the_next_and_once() -> None:
    fb = FakeBroker()
    cluster = ClusterClient("fake:9092")
    cluster._factory = GatedFactory(fb)  # type: ignore[assignment]
    await cluster.start()
    producer = RawProducer(cluster)
    assert await producer.produce([(A, batch("a0"))]) == [0]  # A confirmed under producer id 1
    conn = cluster._conns[(1, 0)]
    assert isinstance(conn, GatedConnection)

    conn._session._begin()  # the re-authentication starts (between requests)
    early = producer.submit([(A, batch("a1")), (A, batch("a2"))])  # wait for its end
    for _ in range(5):
        await asyncio.sleep(0)
    assert fb.requests_with("a1") == [], "a1 went out during the re-authentication"

    late: list[asyncio.Future[int]] = []
    # the caller's next batch arrives just as the re-authentication ends (live traffic)
    conn.on_release = lambda: late.extend(producer.submit([(A, batch("a3"))]))
    conn.release.set()
    await asyncio.wait_for(early.wait(), 10)
    outcomes = await asyncio.wait_for(asyncio.gather(*early, *late, return_exceptions=True), 10)

    order = [v for e in fb.events if e[0] == "recv" for _, v, _, _ in e[2]]
    entries = [(e.value, e.producer_id, e.sequence) for e in fb.logs[A].entries]
    assert order == ["a0", "a1", "a2", "a3"], f"written out of order: {order}"
    assert entries == [("a0", 1, 0), ("a1", 1, 1), ("a2", 1, 2), ("a3", 1, 3)]
    assert outcomes == [1, 2, 3] and not early.result().failures
