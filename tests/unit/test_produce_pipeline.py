"""The produce pipeline across calls (``mm2py.client.producer.pipeline``), on the fake broker.

A caller (the mirror task) submits the next fetch's batches before the previous ones are
acknowledged; the window stays full and a partition's batches keep their order. After a
retriable failure the partition's lane sends its unacknowledged batches again itself (nothing
beyond the window goes out first, nothing is appended twice) and the caller sees only offsets;
once the lane gives up, the partition is stopped (its later batches fail) until the caller resumes it.
"""

from __future__ import annotations

import asyncio

import pytest

from mm2py.client.errors import ResendRefusedError
from mm2py.client.producer import LaneStoppedError, ProduceError, ProducerConfig
from mm2py.client.producer.pipeline import SHARED_PASS_BYTES
from mm2py.protocol.errors_codes import NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER, BrokerError
from mm2py.protocol.types import TopicPartition
from tests.support.fake_broker import A, B, FakeBroker, batch, producer_on

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path


async def confirmed_producer(fb: FakeBroker):  # type: ignore[no-untyped-def]
    producer = await producer_on(fb)
    assert await producer.produce([(A, batch("a0")), (B, batch("b0"))]) == [0, 0]
    return producer


async def test_a_second_call_is_sent_before_the_first_is_acknowledged_and_order_is_kept() -> None:
    fb = FakeBroker()
    producer = await confirmed_producer(fb)
    fb.hold_answers_until_partition_in_flight = 5  # the window's worth, however slow the host
    first = producer.submit([(A, batch(f"a{i}")) for i in range(1, 4)]
                            + [(B, batch(f"b{i}")) for i in range(1, 4)])
    second = producer.submit([(A, batch(f"a{i}")) for i in range(4, 7)] + [(B, batch("b4"))])
    offsets = await asyncio.gather(*first, *second)
    assert offsets == [1, 2, 3, 1, 2, 3, 4, 5, 6, 4]
    assert fb.values(A) == [f"a{i}" for i in range(7)] and fb.values(B) == [f"b{i}" for i in range(5)]
    (last_of_first,) = fb.requests_with("a3")
    (first_of_second,) = fb.requests_with("a4")
    assert not fb.answered_before(last_of_first, first_of_second), "the window drained between calls"
    assert fb.max_partition_in_flight == 5, "more (or fewer) than 5 batches of a partition in flight"


async def test_a_failure_stops_the_partition_across_calls_until_resumed() -> None:
    fb = FakeBroker()
    producer = await confirmed_producer(fb)
    first = producer.submit([(A, batch("a1", size=2000)), (A, batch("a2"))])  # a1: too large
    second = producer.submit([(A, batch("a3")), (B, batch("b1"))])
    outcomes = await asyncio.gather(*first, *second, return_exceptions=True)
    assert isinstance(outcomes[0], BrokerError)
    assert all(isinstance(o, LaneStoppedError) for o in outcomes[1:3]), outcomes
    assert outcomes[3] == 1, "another partition's batch was held back by A's failure"
    assert fb.values(A) == ["a0"], "a batch behind the refused one was appended"
    (early,) = producer.submit([(A, batch("a1"))])
    with pytest.raises(LaneStoppedError):
        await early  # the caller has not resumed A yet: nothing of A goes out
    producer.resume([A])
    again = producer.submit([(A, batch("a1")), (A, batch("a2")), (A, batch("a3"))])
    assert await asyncio.gather(*again) == [1, 2, 3]
    assert fb.values(A) == ["a0", "a1", "a2", "a3"]


async def test_a_lost_answer_early_in_a_long_call_lets_no_more_than_the_window_through() -> None:
    """a1's answer is lost although the broker appended it. Only a1..a5 (the window) may have gone
    out before a1 is sent again: had a6 gone out, a1 would fall out of the broker's five-batch
    memory and its re-send be refused. The lane's re-send appends each batch exactly once."""
    fb = FakeBroker()
    producer = await confirmed_producer(fb)
    fb.lose_response_of = "a1"
    items = [(A, batch(f"a{i}")) for i in range(1, 9)]
    assert await asyncio.gather(*producer.submit(items)) == list(range(1, 9))
    _lost, again = fb.requests_with("a1")
    (a6,) = fb.requests_with("a6")
    assert fb.answered_before(again, a6), "a batch beyond the window was sent before a1 was acknowledged"
    assert fb.values(A) == [f"a{i}" for i in range(9)], "a batch was appended twice or lost"


async def test_a_connection_lost_mid_window_is_resent_by_the_lane_and_the_futures_get_offsets() -> None:
    """The connection is cut once the broker appended a1..a3 (unanswered); a4 and a5 never reach
    it (not even on a new connection: a1..a3 may still be handled first). The futures stay
    pending (none fails) while the lane sends a1..a5 again, in order, on a new connection: the
    broker answers a1..a3 (and b1, in a1's request) from its duplicate detection with their
    offsets and appends a4, a5; every batch is in the log once, under the same producer id."""
    fb = FakeBroker()
    producer = await confirmed_producer(fb)
    pid, connections = producer.producer_id, fb.connections
    fb.cut_connection_at = "a3"
    futures = producer.submit([(A, batch(f"a{i}")) for i in range(1, 9)] + [(B, batch("b1"))])
    assert await asyncio.gather(*futures) == [*range(1, 9), 1]
    assert fb.values(A) == [f"a{i}" for i in range(9)], "a batch was appended twice or lost"
    assert fb.duplicates == 4, "the broker did not answer the batches it held as duplicates"
    assert [len(fb.requests_with(f"a{i}")) for i in range(1, 9)] == [2] * 3 + [1] * 5
    assert fb.connections == connections + 1 and producer.producer_id == pid


async def test_a_leader_that_moved_is_looked_up_again_and_the_lane_re_sends_to_it() -> None:
    """a2 is answered NOT_LEADER_OR_FOLLOWER (a3, a4 behind it are refused as out of sequence):
    the lane drops the stale metadata, asks for it again and sends a2..a4 again, in order; the
    caller sees only the offsets."""
    fb = FakeBroker()
    producer = await confirmed_producer(fb)
    asked = fb.metadata_requests
    fb.refuse_once["a2"] = NOT_LEADER_OR_FOLLOWER
    assert await asyncio.gather(*producer.submit([(A, batch(f"a{i}")) for i in range(1, 5)])) == [1, 2, 3, 4]
    assert fb.metadata_requests > asked, "the leader was not looked up again"
    assert [len(fb.requests_with(f"a{i}")) for i in range(1, 5)] == [1, 2, 2, 2]
    assert fb.values(A) == [f"a{i}" for i in range(5)]


async def test_a_resend_keeps_its_producer_id_when_another_partition_replaced_it() -> None:
    """a1's answer is lost with a2, a3 behind it, and our producer id is replaced meanwhile (the
    broker forgot it on another partition). The lane sends a1..a3 again as they were, under the
    old id, and the broker recognises them; only then does A write under the new id, from
    sequence 0 (ONE-PRODUCER-ID)."""
    fb = FakeBroker()
    producer = await confirmed_producer(fb)
    fb.lose_response_of = "a1"
    fb.lost_answer_after = "a3"
    fb.on_lost_answer = lambda: producer.state.forget(1)
    assert await asyncio.gather(*producer.submit([(A, batch(f"a{i}")) for i in range(1, 4)])) == [1, 2, 3]
    assert fb.duplicates == 3
    assert await producer.produce([(A, batch("a4"))]) == [4]
    assert producer.producer_id == 2
    assert [(e.producer_id, e.sequence) for e in fb.logs[A].entries] == [(1, i) for i in range(4)] + [(2, 0)]


async def test_the_retry_time_out_reports_the_failure_as_an_acknowledged_prefix() -> None:
    """The broker keeps refusing a2 with a retriable error: the lane sends it again, backing off,
    until the producer's retry time-out, and only then reports the failure: A's acknowledged
    prefix (a1), the broker's error, and B untouched."""
    fb = FakeBroker()
    producer = await producer_on(fb, ProducerConfig(retry_timeout_s=0.5))
    assert await producer.produce([(A, batch("a0")), (B, batch("b0"))]) == [0, 0]
    fb.refuse["a2"] = NOT_ENOUGH_REPLICAS_AFTER_APPEND  # retriable, and not a WAIT of the lane
    items = [(A, batch("a1")), (A, batch("a2")), (A, batch("a3")), (B, batch("b1"))]
    started = asyncio.get_running_loop().time()
    with pytest.raises(ProduceError) as err:
        await producer.produce(items)
    assert asyncio.get_running_loop().time() - started >= 0.5, "gave up before the retry time-out"
    assert err.value.offsets == [1, -1, -1, 1]
    cause = err.value.cause
    assert isinstance(cause, BrokerError) and cause.code == NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert len(fb.requests_with("a2")) > 2, "a2 was not sent again"
    assert fb.values(A) == ["a0", "a1"] and fb.values(B) == ["b0", "b1"]
    del fb.refuse["a2"]
    assert await producer.produce([(A, batch("a2")), (A, batch("a3"))]) == [2, 3]


async def test_a_batch_refused_the_only_time_it_was_sent_is_a_failure_not_in_doubt() -> None:
    """A failure leaves the partition in doubt unless the broker refused the only batch out, sent
    once: then the partition surely holds just the acknowledged prefix."""
    fb = FakeBroker()
    producer = await producer_on(fb)
    sure = producer.submit([(A, batch("a0", size=2000)), (B, batch("b0"))])  # unconfirmed: alone
    await sure.wait()
    assert sure.result().offsets == [-1, 0]
    assert not sure.result().failures[A].in_doubt
    producer.resume()
    assert await producer.produce([(A, batch("a0")), (B, batch("b1"))]) == [0, 1]
    doubt = producer.submit([(A, batch("a1", size=2000)), (A, batch("a2"))])  # confirmed: a2 behind
    await doubt.wait()
    assert doubt.result().failures[A].in_doubt and isinstance(doubt.result().cause, BrokerError)


@pytest.mark.parametrize("connections", [1, 2, 3])
async def test_partitions_are_dealt_to_the_connections_and_each_keeps_its_own(connections: int) -> None:
    """With n connections per broker and large batches (SHARE) the partitions go out on n
    connections, dealt in turn as they first appear; each partition's batches all use one
    (IN-ORDER) and still at most five of them are in flight, so up to 5 x n requests are in flight
    at once."""
    fb = FakeBroker(partitions=4, max_batch_bytes=1 << 20)
    producer = await producer_on(fb, ProducerConfig(connections_per_broker=connections))
    parts = [TopicPartition("t", p) for p in range(4)]
    large = SHARED_PASS_BYTES  # a lane's batch alone fills a pass that is not shared
    assert await producer.produce([(tp, batch(f"{tp.partition}-0", large)) for tp in parts]) == [0] * 4
    items = [(tp, batch(f"{tp.partition}-{i}", large)) for i in range(1, 13) for tp in parts]
    # no answer before 5 x n requests were in flight at once (10 s at most): on any host, the
    # window's requests (64 KiB batches, stamped one by one) can all go out before the first answer
    fb.hold_answers_until_in_flight = 5 * connections
    await asyncio.gather(*producer.submit(items))
    used: dict[TopicPartition, set[int]] = {tp: set() for tp in parts}
    for event in fb.events:
        if event[0] == "recv":
            for tp, *_ in event[2]:
                used[tp].add(fb.connection_of[event[1]])
    assert all(len(c) == 1 for c in used.values()), f"a partition's batches went out on two: {used}"
    slots = [next(iter(used[tp])) for tp in parts]
    assert len(set(slots)) == connections
    assert all(slots[i] == slots[i % connections] for i in range(4)), f"not dealt in turn: {slots}"
    for tp in parts:
        assert fb.values(tp) == [f"{tp.partition}-{i}" for i in range(13)]
    assert fb.max_partition_in_flight == 5
    assert fb.max_in_flight == 5 * connections, "the connections did not carry requests at once"


async def test_small_batches_of_many_partitions_share_one_request_over_two_connections() -> None:
    """SHARE: a trickle's pass (small batches, nothing in flight) is one Produce request, not one
    per connection; while many small batches are in flight each partition keeps its connection
    (IN-ORDER) and every one is appended once, in order."""
    fb = FakeBroker(partitions=4)
    producer = await producer_on(fb, ProducerConfig(connections_per_broker=2))
    parts = [TopicPartition("t", p) for p in range(4)]
    assert await producer.produce([(tp, batch(f"{tp.partition}-0")) for tp in parts]) == [0] * 4
    for i in range(1, 4):  # three trickle passes, each answered before the next
        before = fb.requests
        assert await producer.produce([(tp, batch(f"{tp.partition}-{i}")) for tp in parts]) == [i] * 4
        assert fb.requests - before == 1, "a small pass went out in more than one request"
    fb.hold_answers_until_partition_in_flight = 5  # the window's worth, however slow the host
    items = [(tp, batch(f"{tp.partition}-{i}")) for i in range(4, 30) for tp in parts]
    await asyncio.gather(*producer.submit(items))
    for tp in parts:
        assert fb.values(tp) == [f"{tp.partition}-{i}" for i in range(30)]
    assert fb.max_partition_in_flight == 5


def test_the_connections_per_broker_are_bounded() -> None:
    for bad in (0, 9):
        with pytest.raises(ValueError, match="connections_per_broker"):
            ProducerConfig(connections_per_broker=bad)


async def deep_producer(fb: FakeBroker, window: int = 10):  # type: ignore[no-untyped-def]
    producer = await producer_on(fb, ProducerConfig(max_in_flight=window))
    assert await producer.produce([(A, batch("a0"))]) == [0]
    return producer


async def test_a_deep_window_keeps_ten_batches_of_a_partition_in_flight() -> None:
    fb = FakeBroker()
    producer = await deep_producer(fb)
    # the window's worth, however slow the host (G35: on a loaded host the first answer came back
    # before the tenth batch was sent, and the broker saw 9)
    fb.hold_answers_until_partition_in_flight = 10
    assert await producer.produce([(A, batch(f"a{i}")) for i in range(1, 25)]) == list(range(1, 25))
    assert fb.max_partition_in_flight == 10
    assert fb.values(A) == [f"a{i}" for i in range(25)]


async def test_a_deep_window_recovers_in_place_when_at_most_five_may_be_on_the_broker() -> None:
    """a6's answer is lost (the broker appended it); a7..a10 were in flight behind it: five batches
    the broker may hold unanswered, all of which it remembers. Sent again, each is recognised."""
    fb = FakeBroker()
    producer = await deep_producer(fb)
    fb.lose_response_of = "a6"
    fb.lost_answer_after = "a10"  # the rest of the window is on the broker first
    items = [(A, batch(f"a{i}")) for i in range(1, 11)]
    assert await asyncio.gather(*producer.submit(items)) == list(range(1, 11))
    assert fb.duplicates == 5
    again = [(A, batch(f"a{i}")) for i in range(11, 13)]
    assert await producer.produce(again) == [11, 12]
    assert fb.values(A) == [f"a{i}" for i in range(13)], "a batch was appended twice or lost"


async def test_a_resend_the_broker_no_longer_remembers_is_refused_not_sent_under_a_new_id() -> None:
    """a1's answer is lost with a2..a10 in flight behind it: the broker appended all ten and
    remembers only a6..a10, so a1 sent again is refused as out of sequence. That is not a lost
    producer state: a new producer id would append a1..a10 a second time. The batch fails with
    ResendRefusedError (the caller reads the partition), and the producer id stays."""
    fb = FakeBroker()
    producer = await deep_producer(fb)
    pid = producer.producer_id
    fb.lose_response_of = "a1"
    fb.lost_answer_after = "a10"  # the rest of the window is on the broker first
    items = [(A, batch(f"a{i}")) for i in range(1, 11)]
    submission = producer.submit(items)
    outcomes = await asyncio.gather(*submission, return_exceptions=True)
    assert isinstance(outcomes[0], ResendRefusedError), outcomes
    assert all(isinstance(o, LaneStoppedError) for o in outcomes[1:]), outcomes
    assert submission.result().failures[A].in_doubt
    assert producer.producer_id == pid and fb.next_producer_id == pid + 1, "a new producer id was taken"
    assert fb.values(A) == [f"a{i}" for i in range(11)], "a batch was appended twice"
    (other,) = producer.submit([(B, batch("b0"))])
    assert await other == 0, "another partition was held up"


async def test_a_resend_refused_after_later_batches_were_acknowledged_is_not_sent_under_a_new_id() -> None:
    """As above, but the answers of a2..a10 arrive before a1's time-out: the broker appended a2
    after a1 (it appends a producer's batches in sequence), so a1 is on it however few batches
    are unanswered. Refused when sent again, it fails as in doubt; no new producer id."""
    fb = FakeBroker()
    producer = await deep_producer(fb)
    pid = producer.producer_id
    fb.lose_response_of, fb.lost_answer_after, fb.lost_answer_last = "a1", "a10", True
    submission = producer.submit([(A, batch(f"a{i}")) for i in range(1, 11)])
    outcomes = await asyncio.gather(*submission, return_exceptions=True)
    assert isinstance(outcomes[0], ResendRefusedError), outcomes
    assert outcomes[1:] == list(range(2, 11))  # acknowledged before the time-out
    assert producer.producer_id == pid and fb.next_producer_id == pid + 1, "a new producer id was taken"
    assert fb.values(A) == [f"a{i}" for i in range(11)], "a batch was appended twice"


async def test_a_deep_resend_waits_for_no_new_producer_id() -> None:
    """As above, but our producer id is replaced (another partition found it forgotten) before
    a1 is sent again: under the new id the broker would take a1..a10 as new. The re-send keeps
    the old id instead, and is refused."""
    fb = FakeBroker()
    producer = await deep_producer(fb)
    fb.lose_response_of = "a1"
    fb.lost_answer_after = "a10"  # the rest of the window is on the broker first
    fb.on_lost_answer = lambda: producer.state.forget(producer.producer_id)
    items = [(A, batch(f"a{i}")) for i in range(1, 11)]
    outcomes = await asyncio.gather(*producer.submit(items), return_exceptions=True)
    assert isinstance(outcomes[0], ResendRefusedError), outcomes
    assert fb.values(A) == [f"a{i}" for i in range(11)], "a batch was appended twice"


async def test_after_a_failure_in_doubt_a_refusal_takes_no_new_producer_id() -> None:
    """The caller resumes a partition whose failure was in doubt and sends other batches from the
    acknowledged prefix: the broker, holding more, refuses them as out of sequence. A new
    producer id would append them next to what it holds: refused instead (ResendRefusedError)."""
    fb = FakeBroker()
    producer = await deep_producer(fb)
    pid = producer.producer_id
    fb.lose_response_of = "a1"
    fb.lost_answer_after = "a10"
    await asyncio.gather(*producer.submit([(A, batch(f"a{i}")) for i in range(1, 11)]),
                         return_exceptions=True)
    producer.resume([A])
    with pytest.raises(ProduceError) as err:
        await producer.produce([(A, batch("x1"))])
    assert isinstance(err.value.cause, ResendRefusedError), err.value
    assert producer.producer_id == pid and fb.values(A) == [f"a{i}" for i in range(11)]


async def test_start_asks_for_the_producer_id_before_the_first_batch() -> None:
    fb = FakeBroker()
    producer = await producer_on(fb)
    producer.start()
    for _ in range(10):
        await asyncio.sleep(0)
    assert fb.next_producer_id == 2 and producer.producer_id == 1, "no id asked for yet"
    assert await producer.produce([(A, batch("a0"))]) == [0]
    assert fb.next_producer_id == 2, "a second id was taken"
    await producer.close()
