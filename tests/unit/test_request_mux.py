"""RequestMux: Produce requests of several producers ready together on one connection go out as one
(SHARED-REQUEST), a partition's batches in the order they were made (IN-ORDER), each caller gets
its own partitions' answers, a failure reaches every caller of that request, a cancelled caller's
part is left out. The mux against real brokers: tests/integration/test_leadership.py (a source
broker SIGSTOPped under four tasks)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from mm2py.client.producer import RequestMux
from mm2py.client.producer.requests import Answers
from mm2py.protocol.api import ProducePartitionResponse
from mm2py.protocol.types import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class Requests:
    """Stands in for ProduceRequests.request_now: records each request's partitions in write order."""

    def __init__(self) -> None:
        self.written: list[tuple[Any, dict[TopicPartition, bytes]]] = []
        self.fail: BaseException | None = None

    async def request_now(self, conn: Any, part: Mapping[TopicPartition, bytes]) -> dict[
            TopicPartition, ProducePartitionResponse]:
        self.written.append((conn, dict(part)))  # written before the first wait, as the real one
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        return Answers((tp, ProducePartitionResponse(tp.topic, None, tp.partition, 0, len(data), -1, 0))
                       for tp, data in part.items())


def test_parts_ready_together_go_out_as_one_request_each_caller_gets_its_own_answers() -> None:
    async def main() -> None:
        mux, req = RequestMux(), Requests()
        got = await asyncio.gather(
            mux.request(req, "c1", {A0: b"x"}),  # type: ignore[arg-type]
            mux.request(req, "c1", {A1: b"yy"}),  # type: ignore[arg-type]
            mux.request(req, "c2", {B0: b"zzz"}),  # type: ignore[arg-type]
        )
        assert [(c, sorted(p)) for c, p in req.written] == [("c1", [A0, A1]), ("c2", [B0])]
        assert [sorted(g) for g in got] == [[A0], [A1], [B0]]
        assert got[1][A1].base_offset == 2  # the answer to its own batch
        assert (mux.sent, mux.parts) == (2, 3)

    asyncio.run(main())


def test_a_partition_named_twice_starts_the_next_request_in_order() -> None:
    async def main() -> None:
        mux, req = RequestMux(), Requests()
        await asyncio.gather(
            mux.request(req, "c", {A0: b"1"}),  # type: ignore[arg-type]
            mux.request(req, "c", {A0: b"2", A1: b"x"}),  # type: ignore[arg-type]
            mux.request(req, "c", {B0: b"y"}),  # type: ignore[arg-type]
        )
        assert [p for _, p in req.written] == [{A0: b"1"}, {A0: b"2", A1: b"x", B0: b"y"}]

    asyncio.run(main())


def test_a_request_waits_for_parts_at_most_a_few_loop_iterations() -> None:
    async def main() -> None:
        mux, req = RequestMux(), Requests()

        async def late(n: int) -> Any:
            for _ in range(n):
                await asyncio.sleep(0)
            return await mux.request(req, "c", {B0: b"late"})  # type: ignore[arg-type]

        # a producer busy for many iterations does not hold up the first one's request
        first = asyncio.ensure_future(mux.request(req, "c", {A0: b"x"}))  # type: ignore[arg-type]
        await asyncio.gather(first, late(50))
        assert [sorted(p) for _, p in req.written] == [[A0], [B0]]

    asyncio.run(main())


def test_a_failed_request_fails_every_caller_and_a_cancelled_part_is_left_out() -> None:
    async def main() -> None:
        mux, req = RequestMux(), Requests()
        req.fail = ConnectionResetError("lost")
        gone = asyncio.ensure_future(mux.request(req, "c", {A1: b"x"}))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        gone.cancel()
        results = await asyncio.gather(
            mux.request(req, "c", {A0: b"x"}),  # type: ignore[arg-type]
            mux.request(req, "c", {B0: b"y"}),  # type: ignore[arg-type]
            return_exceptions=True,
        )
        assert all(isinstance(r, ConnectionResetError) for r in results)
        assert [sorted(p) for _, p in req.written] == [[A0, B0]]
        with pytest.raises(asyncio.CancelledError):
            await gone

    asyncio.run(main())


def test_size_bound_splits_requests() -> None:
    async def main() -> None:
        mux, req = RequestMux(max_request_bytes=4), Requests()
        await asyncio.gather(
            mux.request(req, "c", {A0: b"abc"}),  # type: ignore[arg-type]
            mux.request(req, "c", {A1: b"def"}),  # type: ignore[arg-type]
        )
        assert [sorted(p) for _, p in req.written] == [[A0], [A1]]

    asyncio.run(main())
