"""FetchHub's rules on a scripted fetcher: one request per broker for every member, results to the
member that owns the partition, TAKEN / STALE / BOUNDED / ONE-OWNER, a stalled broker holding up
only its own partitions, a batch that stays corrupt failing only its member.

The hub against real brokers: tests/integration/test_leadership.py (a source broker
SIGSTOPped under four tasks)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from mm2py.client.fetch_hub import FetchHub, Linger
from mm2py.client.fetcher import FetchedPartition, FetcherConfig
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.record_codec import Record, build_batch
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

A0, A1, B0, B1 = (TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0),
                  TopicPartition("b", 1))
LEADERS = {A0: 1, A1: 2, B0: 1, B1: 2}


def batch(offset: int, size: int = 10) -> RecordBatch:
    return RecordBatch(build_batch([Record(0, 0, None, b"x" * size)], base_offset=offset, base_timestamp=0))


class Cluster:
    generation = 0

    def leader_of(self, tp: TopicPartition) -> int | None:
        return LEADERS.get(tp)

    async def refresh_metadata(self, topics: Any = None) -> None:
        return None


class Fetcher:
    """Answers each request from ``data`` (tp -> {offset: batches}); ``stall`` brokers never answer."""

    def __init__(self) -> None:
        self.requests: list[dict[TopicPartition, int]] = []
        self.data: dict[TopicPartition, dict[int, list[RecordBatch]]] = {}
        self.stall: set[int] = set()
        self.corrupt: TopicPartition | None = None

    async def fetch(self, positions: Mapping[TopicPartition, int],
                    partition_max_bytes: Mapping[TopicPartition, int] | None = None,
                    ) -> dict[TopicPartition, FetchedPartition]:
        """``requests``: the partitions each request reads (those limited to 0 bytes are named
        but not read, as a broker does: none of their batches comes back)."""
        named = positions
        limits = partition_max_bytes or {}
        positions = {tp: o for tp, o in named.items() if limits.get(tp) != 0}
        self.requests.append(dict(positions))
        if {LEADERS[tp] for tp in named} & self.stall:
            await asyncio.Event().wait()
        if self.corrupt in positions:
            exc = CorruptBatchError("bad crc")
            exc.partition = self.corrupt
            raise exc
        await asyncio.sleep(0.001)
        out = {}
        for tp, o in positions.items():
            batches = self.data.get(tp, {}).pop(o, None)
            if batches:
                out[tp] = FetchedPartition(tp, o, batches, next_offset=batches[-1].next_offset)
        return out

    async def close(self) -> None:
        return None


def hub_of(fetcher: Fetcher, **kw: Any) -> FetchHub:
    hub = FetchHub(Cluster(), FetcherConfig(), Linger(), **kw)  # type: ignore[arg-type]
    hub.fetcher = fetcher  # type: ignore[assignment]
    return hub


def test_one_request_per_broker_for_all_members_and_results_to_their_owners() -> None:
    async def main() -> None:
        f = Fetcher()
        f.data = {A0: {5: [batch(5)]}, B1: {7: [batch(7)]}}
        hub = hub_of(f)
        t1, t2 = hub.member("t1", 1 << 20), hub.member("t2", 1 << 20)
        got1, got2 = await asyncio.gather(t1.poll({A0: 5, A1: 0}, 1.0), t2.poll({B0: 0, B1: 7}, 1.0))
        assert list(got1) == [A0] and got1[A0].fetch_offset == 5
        assert list(got2) == [B1] and got2[B1].fetch_offset == 7
        # every request names one broker's partitions of both members, never one member's alone
        assert {frozenset(r) for r in f.requests[:2]} == {frozenset({A0, B0}), frozenset({A1, B1})}
        await hub.close()

    asyncio.run(main())


def test_taken_until_asked_again_and_stale_results_dropped() -> None:
    async def main() -> None:
        f = Fetcher()
        f.data = {A0: {0: [batch(0)], 1: [batch(1)]}}
        hub = hub_of(f)
        t1 = hub.member("t1", 1 << 20)
        got = await t1.poll({A0: 0}, 1.0)
        assert got[A0].next_offset == 1
        n = len(f.requests)
        await asyncio.sleep(0.05)  # TAKEN: not fetched again until the member says where it is
        assert all(A0 not in r for r in f.requests[n:])
        got = await t1.poll({A0: 1}, 1.0)
        assert got[A0].fetch_offset == 1
        # a result for a position the member no longer asks for is not handed over (STALE)
        assert t1.deliver(FetchedPartition(A0, 9, [batch(9)], next_offset=10)) is False
        await hub.close()

    asyncio.run(main())


def test_a_member_that_stops_asking_holds_one_result_then_nothing_is_fetched_for_it() -> None:
    async def main() -> None:
        f = Fetcher()
        f.data = {A0: {0: [batch(0, 300)]}, B0: {0: [batch(0, 300)]}}
        hub = hub_of(f)
        t1, t2 = hub.member("t1", 100), hub.member("t2", 1 << 20)
        t1.asked = {A0: 0}
        hub.owners[A0] = t1
        got = await t2.poll({B0: 0}, 1.0)  # t1 does not ask, yet its partition is fetched with t2's
        assert B0 in got and A0 in t1.inbox and t1.full
        n = len(f.requests)
        await asyncio.wait_for(t2.poll({B0: 1}, 0.05), 1.0)
        assert all(A0 not in r for r in f.requests[n:])  # BOUNDED and TAKEN
        got = await t1.poll({A0: 0}, 1.0)  # held for the position it asks: handed over at once
        assert got[A0].fetch_offset == 0 and not t1.full
        await hub.close()

    asyncio.run(main())


def test_a_partition_moves_to_its_new_member() -> None:
    async def main() -> None:
        f = Fetcher()
        hub = hub_of(f)
        t1, t2 = hub.member("t1", 1 << 20), hub.member("t2", 1 << 20)
        await t1.poll({A0: 3, A1: 0}, 0.05)
        f.data = {A0: {3: [batch(3)]}}
        got = await t2.poll({A0: 3}, 1.0)  # ONE-OWNER: the last member that asked
        assert A0 in got and A0 not in t1.asked and hub.owners[A0] is t2
        await hub.close()

    asyncio.run(main())


def test_a_stalled_broker_holds_up_only_its_partitions() -> None:
    async def main() -> None:
        f = Fetcher()
        f.stall = {2}
        f.data = {A0: {0: [batch(0)], 1: [batch(1)]}}
        hub = hub_of(f)
        t1 = hub.member("t1", 1 << 20)
        got = await t1.poll({A0: 0, A1: 0}, 1.0)
        assert list(got) == [A0]
        got = await t1.poll({A0: 1, A1: 0}, 1.0)
        assert list(got) == [A0]
        await hub.close()

    asyncio.run(main())


def test_a_batch_that_stays_corrupt_fails_only_its_member() -> None:
    async def main() -> None:
        f = Fetcher()
        f.corrupt = A0
        hub = hub_of(f, corrupt_retries=2)
        t1, t2 = hub.member("t1", 1 << 20), hub.member("t2", 1 << 20)
        f.data = {B0: {0: [batch(0)]}}
        with pytest.raises(CorruptBatchError):
            await t1.poll({A0: 0}, 5.0)
        assert hub.corrupt_batches_seen == 2
        f.corrupt = None
        got = await t2.poll({B0: 0}, 1.0)
        assert B0 in got
        await hub.close()

    asyncio.run(main())


def test_requests_follow_each_poll_positions_and_partitions() -> None:
    """The hub keeps every member's positions merged between rounds; each request names the
    positions of the members' last polls, and a partition dropped is no longer named."""
    async def main() -> None:
        f = Fetcher()
        hub = hub_of(f)

        def last_to_broker_1() -> dict[TopicPartition, int]:  # A0 and B0's leader
            return [r for r in f.requests if r and LEADERS[next(iter(r))] == 1][-1]

        t1, t2 = hub.member("t1", 1 << 20), hub.member("t2", 1 << 20)
        await asyncio.gather(t1.poll({A0: 0, B0: 0}, 0.05), t2.poll({A1: 0}, 0.05))
        await t1.poll({A0: 5, B0: 0}, 0.05)  # a position moved
        assert last_to_broker_1().get(A0) == 5 and last_to_broker_1().get(B0) == 0
        await t1.poll({A0: 6}, 0.05)  # a partition left
        assert B0 not in last_to_broker_1() and last_to_broker_1().get(A0) == 6
        f.data = {B0: {3: [batch(3)]}}
        got = await t2.poll({A1: 0, B0: 3}, 1.0)  # and joined another member
        assert got[B0].fetch_offset == 3 and last_to_broker_1().get(A0) == 6
        await hub.close()

    asyncio.run(main())
