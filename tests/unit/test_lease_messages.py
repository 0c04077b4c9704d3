"""The lease messages between executors and the Spark driver, and the driver's coordinator over a
real loopback socket (no Spark, no broker: the hand-over protocol's rules)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mm2py.engine.latency import LATENCY_BUCKETS, Histogram, PartitionTimes
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.spark.driver.lease_coordinator import LeaseCoordinator
from mm2py.runtime.spark.driver.lease_table import LeaseState, LeaseTable
from mm2py.runtime.spark.lease_messages import (
    Ack,
    GoMsg,
    Hello,
    HostHello,
    HostStats,
    LeaseWireError,
    Ready,
    Released,
    Report,
    StopMsg,
    decode,
    encode,
)

A, B = TopicPartition("orders", 0), TopicPartition("orders", 1)

tps = st.builds(TopicPartition, st.text(min_size=1, max_size=20), st.integers(0, 10_000))
histograms = st.builds(lambda counts, total: Histogram.of(counts, total),
                       st.lists(st.integers(0, 10**9), min_size=len(LATENCY_BUCKETS) + 1,
                                max_size=len(LATENCY_BUCKETS) + 1),
                       st.floats(0, 1e9, allow_nan=False))
times = st.dictionaries(tps, st.builds(PartitionTimes, histograms, histograms,
                                       st.floats(0, 1e6, allow_nan=False)), max_size=3)
positions = st.dictionaries(tps, st.none() | st.builds(Position, st.integers(0, 2**62),
                                                      st.none() | st.integers(0, 2**62),
                                                      st.none() | st.text(max_size=22)), max_size=5)
messages = st.one_of(
    st.builds(Hello, st.text(), st.text()),
    st.builds(Ready, st.text(), st.text()),
    st.builds(Report, st.text(), st.text(), st.dictionaries(st.text(), st.integers(0, 2**62)),
              st.dictionaries(tps, st.integers(0, 2**62)), st.tuples(st.integers(0, 99), st.integers(0, 99)),
              times, st.lists(st.text(), max_size=3).map(tuple),
              st.lists(st.dictionaries(st.text(max_size=8), st.text() | st.integers(0, 2**62)
                                       | st.floats(0, 1e6, allow_nan=False)), max_size=2).map(tuple)),
    st.builds(Released, st.text(), st.text(), positions),
    st.builds(GoMsg, positions),
    st.builds(StopMsg, st.text()),
    st.just(Ack()),
    st.builds(HostHello, st.text(), st.text(), st.text(), st.integers(0, 1000)),
    st.builds(HostStats, st.text(), st.text(),
              st.dictionaries(st.tuples(st.text(), st.integers(0, 80)), st.integers(0, 2**62), max_size=4),
              st.floats(0, 1e7, allow_nan=False), st.integers(0, 2**40)),
)


@given(messages)
def test_every_message_survives_the_wire(msg: object) -> None:
    line = encode(msg)  # type: ignore[arg-type]
    assert line.endswith(b"\n") and line.count(b"\n") == 1  # one message per line
    assert decode(line) == msg


@given(st.binary(max_size=200))
def test_garbage_is_a_lease_wire_error_and_nothing_else(line: bytes) -> None:
    with contextlib.suppress(LeaseWireError):
        decode(line)


@pytest.mark.parametrize("line", [
    b'{"t":"go","positions":[["orders",0,"5",null]]}',  # an offset as a string
    b'{"t":"go","positions":[["orders",true,5,null]]}',  # a partition as a bool
    b'{"t":"go","positions":[["orders",0,5,null,7]]}',  # a topic id as a number
    b'{"t":"hello","lease":"x"}',  # no token
    b'{"t":"report","lease":"x","token":"t","metrics":{},"lag":[],"codec":[0,0],"refused":[5]}',
    b'{"t":"report","lease":"x","token":"t","metrics":{},"lag":[],"codec":[0,0],"held":[5]}',
    b'{"t":"host_stats","host":"h","token":"t","requests":[["east","1",3]],"cpu":1.5,"rss":9}',
    b'{"t":"host_stats","host":"h","token":"t","requests":[],"cpu":"1.5","rss":9}',
    b'{"t":"teleport"}',
    b'[1,2]',
])
def test_malformed_messages_are_refused(line: bytes) -> None:
    with pytest.raises(LeaseWireError):
        decode(line)


class Executor:
    """The executor's end, by hand: a socket that speaks the lease messages."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, coordinator: LeaseCoordinator) -> Executor:
        return cls(*await asyncio.open_connection(*coordinator.address))

    async def send(self, msg: Hello | Report | Released) -> None:
        self.writer.write(encode(msg))
        await self.writer.drain()

    async def receive(self) -> object:
        line = await asyncio.wait_for(self.reader.readline(), 5)
        return decode(line) if line else None


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_the_coordinator_grants_hands_over_and_fences_over_a_socket() -> None:
    async def go() -> None:
        table = LeaseTable(fence_seconds=0.2, ready_timeout=30)
        reports: list[Report] = []
        coord = LeaseCoordinator(table, on_report=lambda lease, r: reports.append(r), tick_seconds=0.05)
        await coord.start()
        try:
            old = table.start("f", 0, [A, B], now=0)
            first = await Executor.connect(coord)
            await first.send(Hello(old.lease_id, coord.token))
            # the driver's messages name their lease (leases on a mirror host share a connection)
            assert await first.receive() == Ack(old.lease_id)  # accepted: it may build its task
            await first.send(Ready(old.lease_id, coord.token))
            assert await first.receive() == GoMsg({A: None, B: None}, old.lease_id)  # nothing carried
            await first.send(Report(old.lease_id, coord.token, {"records": 7}, {A: 3}))
            assert await first.receive() == Ack(old.lease_id)
            assert reports[-1].metrics == {"records": 7}

            new = table.start("f", 0, [A, B], now=1)
            second = await Executor.connect(coord)
            await second.send(Hello(new.lease_id, coord.token))
            assert await second.receive() == Ack(new.lease_id)
            await second.send(Ready(new.lease_id, coord.token))
            assert isinstance(await first.receive(), StopMsg)  # the predecessor is told to stop
            await first.send(Released(old.lease_id, coord.token, {A: Position(10, 4), B: None}))
            # only the cleanly released partition carries its position over
            assert await second.receive() == GoMsg({A: Position(10, 4), B: None}, new.lease_id)
            assert table.holder("f", A) == new.lease_id

            # a second executor claiming the same lease is turned away, the holder keeps it
            intruder = await Executor.connect(coord)
            await intruder.send(Hello(new.lease_id, coord.token))
            assert isinstance(await intruder.receive(), StopMsg)
            assert table.holder("f", A) == new.lease_id

            # its Spark job ended and its connection closed: fenced, its partitions are free
            coord.job_done(new.lease_id)
            second.writer.close()
            for _ in range(100):
                if table.leases[new.lease_id].state is LeaseState.LOST:
                    break
                await asyncio.sleep(0.02)
            assert table.leases[new.lease_id].state is LeaseState.LOST
            assert table.holder("f", A) is None

            # an executor killed while its Spark job still runs (its socket closed by the kernel):
            # the lease is given up two fence intervals after it was last heard, not before
            third = table.start("f", 0, [A], now=2)
            ex = await Executor.connect(coord)
            await ex.send(Hello(third.lease_id, coord.token))
            assert await ex.receive() == Ack(third.lease_id)
            await ex.send(Ready(third.lease_id, coord.token))
            assert isinstance(await ex.receive(), GoMsg)
            ex.writer.close()
            closed = asyncio.get_running_loop().time()
            while table.leases[third.lease_id].state is not LeaseState.LOST:
                assert asyncio.get_running_loop().time() - closed < 5
                await asyncio.sleep(0.02)
            assert asyncio.get_running_loop().time() - closed >= 2 * 0.2 - 0.05
        finally:
            await coord.close()

    run(go())


def test_a_wrong_token_is_refused_and_grants_nothing() -> None:
    async def go() -> None:
        table = LeaseTable()
        coord = LeaseCoordinator(table)
        await coord.start()
        try:
            lease = table.start("f", 0, [A], now=0)
            ex = await Executor.connect(coord)
            await ex.send(Hello(lease.lease_id, "not-the-token"))
            assert await ex.receive() is None  # closed without an answer
            assert table.leases[lease.lease_id].state is LeaseState.STARTING
            assert table.holder("f", A) is None
        finally:
            await coord.close()

    run(go())


def test_time_alone_fences_a_silent_lease_on_the_coordinators_tick_job_which_survives_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A lease whose Spark job ended but whose connection stays open and silent is given up by the
    table's clock — the coordinator's ``lease table tick`` job — and a tick that fails is logged
    with the job's name and does not stop the next ones."""

    async def go() -> None:
        table = LeaseTable(fence_seconds=0.05, ready_timeout=30)
        coord = LeaseCoordinator(table, tick_seconds=0.02)
        ticks = table.tick
        calls: list[int] = []  # ticks once the executor fell silent (only the tick job's then)
        armed = asyncio.Event()

        def flaky_tick(now: float) -> Any:
            if armed.is_set():
                calls.append(1)
                if len(calls) == 1:
                    raise RuntimeError("tick hiccup")
            return ticks(now)

        table.tick = flaky_tick  # type: ignore[method-assign]
        await coord.start()
        try:
            lease = table.start("f", 0, [A], now=time.monotonic())
            ex = await Executor.connect(coord)
            await ex.send(Hello(lease.lease_id, coord.token))
            assert await ex.receive() == Ack(lease.lease_id)
            await ex.send(Ready(lease.lease_id, coord.token))
            assert isinstance(await ex.receive(), GoMsg)
            coord.job_done(lease.lease_id)  # still connected: only time can fence it now
            armed.set()
            for _ in range(200):
                if table.leases[lease.lease_id].state is LeaseState.LOST:
                    break
                await asyncio.sleep(0.02)
            assert table.leases[lease.lease_id].state is LeaseState.LOST
            assert len(calls) > 1
        finally:
            await coord.close()

    with caplog.at_level(logging.WARNING, logger="mm2py.engine.scheduler"):
        run(go())
    assert any("lease coordinator: lease table tick failed" in r.getMessage()
               and "tick hiccup" in r.getMessage() for r in caplog.records)
