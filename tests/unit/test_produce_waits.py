"""What the target asks the producer to wait for (``mm2py.client.producer``'s WAIT and THROTTLED),
on the fake broker: a partition with too few in-sync replicas is reported at once and not in doubt,
so its caller rests it alone while the others go on; a broker's quota throttle time is honoured
before anything more goes to it, and counted."""

from __future__ import annotations

import asyncio
from collections import deque

import pytest

from mm2py.client.producer import LaneStoppedError, ProducerConfig
from mm2py.client.producer.lanes import Entry, Lane
from mm2py.client.producer.throttle import Throttles
from mm2py.protocol.errors_codes import NOT_ENOUGH_REPLICAS, BrokerError
from tests.support.fake_broker import A, B, FakeBroker, batch, producer_on

pytestmark = pytest.mark.native_path


async def test_too_few_in_sync_replicas_fails_the_partition_at_once_not_in_doubt_and_others_go_on() -> None:
    """a2 is refused NOT_ENOUGH_REPLICAS the one time it is sent: A stops at once (not after the
    retry time-out), its acknowledged prefix is a1 and nothing past it can be on the broker;
    B's batch in the same call is acknowledged. Once the replicas are back and the caller resumed
    A, a2 and a3 are appended once each, in order."""
    fb = FakeBroker()
    producer = await producer_on(fb, ProducerConfig(retry_timeout_s=30.0))
    assert await producer.produce([(A, batch("a0")), (B, batch("b0"))]) == [0, 0]
    fb.refuse["a2"] = NOT_ENOUGH_REPLICAS
    loop = asyncio.get_running_loop()
    started = loop.time()
    sub = producer.submit([(A, batch("a1")), (A, batch("a2")), (A, batch("a3")), (B, batch("b1"))])
    await sub.wait()
    assert loop.time() - started < 5.0, "the lane retried toward its 30 s time-out"
    result = sub.result()
    assert result.offsets == [1, -1, -1, 1]
    failure = result.failures[A]
    assert isinstance(failure.cause, BrokerError) and failure.cause.code == NOT_ENOUGH_REPLICAS
    assert not failure.in_doubt
    assert len(fb.requests_with("a2")) == 1, "a2 was sent again before the caller saw the refusal"
    del fb.refuse["a2"]
    producer.resume([A])
    assert await producer.produce([(A, batch("a2")), (A, batch("a3"))]) == [2, 3]
    assert fb.values(A) == ["a0", "a1", "a2", "a3"] and fb.values(B) == ["b0", "b1"]


async def test_batches_behind_the_refused_one_fail_as_stopped_and_later_calls_wait_for_resume() -> None:
    fb = FakeBroker()
    producer = await producer_on(fb)
    assert await producer.produce([(A, batch("a0"))]) == [0]
    fb.refuse["a1"] = NOT_ENOUGH_REPLICAS
    outcomes = await asyncio.gather(*producer.submit([(A, batch(f"a{i}")) for i in range(1, 5)]),
                                    return_exceptions=True)
    assert isinstance(outcomes[0], BrokerError)
    assert all(isinstance(o, LaneStoppedError) for o in outcomes[1:]), outcomes
    assert fb.values(A) == ["a0"], "a batch behind the refused one was appended"


def _entry(value: str) -> Entry:
    return Entry(A, batch(value), asyncio.get_running_loop().create_future())


async def test_only_a_refusal_of_the_first_batch_sent_once_with_nothing_in_doubt_is_sure() -> None:
    """A refusal of a re-send says nothing of the earlier attempt (the broker checks its in-sync
    replicas before it looks for a duplicate), nor does a refusal of a later batch say anything
    of an earlier one in flight."""
    first, second = _entry("a1"), _entry("a2")
    lane = Lane(unacked=deque([first, second]))
    first.attempts = second.attempts = 1
    assert lane.surely_refused(first)
    assert not lane.surely_refused(second)
    first.attempts = 2
    assert not lane.surely_refused(first)
    first.attempts = 1
    lane.gap = True
    assert not lane.surely_refused(first)
    lane.gap, lane.blind = False, True
    assert not lane.surely_refused(first)
    lane.blind = False
    lane.inflight, lane.sent = 2, 2
    assert lane.stop(A, BrokerError(NOT_ENOUGH_REPLICAS, "x"), first, surely=True) == [first, second]
    assert lane.stopped is not None and not lane.stopped.in_doubt
    assert lane.stale == 2, "the attempts still out must be answered before the lane sends again"


async def test_a_throttle_time_holds_the_next_request_to_that_broker_until_it_ends() -> None:
    fb = FakeBroker()
    producer = await producer_on(fb)
    assert await producer.produce([(A, batch("a0"))]) == [0]
    fb.throttle_next_ms = 300
    loop = asyncio.get_running_loop()
    assert await producer.produce([(A, batch("a1"))]) == [1]
    answered = loop.time()
    assert await producer.produce([(A, batch("a2")), (B, batch("b0"))]) == [2, 0]
    assert loop.time() - answered >= 0.25, "a request went to the throttled broker before the throttle ended"
    throttles = producer.pipeline.throttles
    assert throttles.total_ms == 300
    (t,) = throttles.by_broker.values()
    assert t.last_ms == 300 and t.total_ms == 300
    assert fb.values(A) == ["a0", "a1", "a2"]


def test_throttles_block_only_their_broker_until_the_end_and_stay_shown_a_while() -> None:
    t = Throttles()
    assert t.note(1, 500, now=100.0) == 0.5
    assert t.blocked(1, now=100.4) and not t.blocked(2, now=100.4)
    assert not t.blocked(1, now=100.6) and not t.blocking, "an ended throttle is pruned"
    assert [x.broker for x in t.recent(now=105.0)] == [1]
    assert t.recent(now=111.0) == []
    t.note(1, 200, now=200.0)
    assert t.total_ms == 700 and t.by_broker[1].total_ms == 700


def test_a_watched_sink_shows_its_inner_sinks_throttling() -> None:
    """The task reads THROTTLED through the sink it holds; the runtime wraps the mirror sink."""
    from types import SimpleNamespace

    from mm2py.client.producer.throttle import Throttles
    from mm2py.runtime.active_topics import WatchedSink

    throttles = Throttles()
    throttles.note(2, 300, now=0.0)
    inner = SimpleNamespace(throttles=throttles)
    watched = WatchedSink(inner, lambda _topics: None)  # type: ignore[arg-type]
    assert watched.throttles is throttles and watched.throttles.total_ms == 300
    assert WatchedSink(SimpleNamespace(), lambda _topics: None).throttles is None  # type: ignore[arg-type]
