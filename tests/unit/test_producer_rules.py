"""The raw producer's rules, checked against an in-memory fake of one broker at the client's seam.

The fake (``fake_broker.py``) stands in for the broker *connection*: the producer's own code runs
unchanged (pipeline, probe, window, new producer ids). Real-broker tests of the same rules are in
tests/integration/test_raw_producer.py; the pipeline across calls is in test_produce_pipeline.py.
"""

from __future__ import annotations

import pytest

from mm2py.client.producer import ProduceError
from tests.support.fake_broker import OUT_OF_ORDER_SEQUENCE_NUMBER, A, B, FakeBroker, batch, producer_on

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path

# ---------------------------------------------------------------------------------- rules


async def test_after_a_failure_mid_window_only_the_acknowledged_prefix_is_reported() -> None:
    """A's second batch is refused mid-window; the broker refuses A's later batches as out of
    sequence and appends all of B's. Reported: A's prefix (one batch), all of B, in order; A's
    sequence continues right after the prefix."""
    fb = FakeBroker()
    producer = await producer_on(fb)
    assert await producer.produce([(A, batch("a0")), (B, batch("b0"))]) == [0, 0]  # both confirmed
    items = [(A, batch("a1")), (A, batch("a2", size=2000)), (A, batch("a3")), (A, batch("a4")),
             (B, batch("b1")), (B, batch("b2")), (B, batch("b3")), (B, batch("b4"))]
    with pytest.raises(ProduceError) as err:
        await producer.produce(items)
    assert fb.max_in_flight > 1, "the window did not pipeline"
    assert err.value.offsets == [1, -1, -1, -1, 1, 2, 3, 4]
    assert fb.values(A) == ["a0", "a1"] and fb.values(B) == ["b0", "b1", "b2", "b3", "b4"]
    assert await producer.produce([(A, batch("a2")), (A, batch("a3"))]) == [2, 3]
    assert fb.values(A) == ["a0", "a1", "a2", "a3"]


async def test_a_failure_only_we_saw_is_sent_again_and_recognised_not_appended_twice() -> None:
    """The answer to the request carrying a2 is lost although the broker appended it (and the
    batches after it). The call sends again what was not acknowledged, with the same sequences:
    the broker recognises the batches it has, so each is in the log once and the offsets are right."""
    fb = FakeBroker()
    producer = await producer_on(fb)
    assert await producer.produce([(A, batch("a0")), (B, batch("b0"))]) == [0, 0]
    fb.lose_response_of = "a2"
    items = [(A, batch("a1")), (A, batch("a2")), (A, batch("a3")), (B, batch("b1")), (B, batch("b2"))]
    assert await producer.produce(items) == [1, 2, 3, 1, 2]
    assert len(fb.requests_with("a2")) == 2, "a2 was not sent again after its answer was lost"
    assert fb.values(A) == ["a0", "a1", "a2", "a3"] and fb.values(B) == ["b0", "b1", "b2"]


async def test_an_unconfirmed_partition_sends_its_first_batch_alone_before_pipelining() -> None:
    """A new producer: the first request carries only the first batch of each partition and is
    answered before any later batch of those partitions is sent. A's first batch is refused (too
    large); a broker that does not know the producer would take ANY sequence, so nothing after it
    may have been sent."""
    fb = FakeBroker()
    producer = await producer_on(fb)
    items = [(A, batch("a0", size=2000)), (A, batch("a1")), (A, batch("a2")),
             (B, batch("b0")), (B, batch("b1")), (B, batch("b2"))]
    with pytest.raises(ProduceError) as err:
        await producer.produce(items)
    assert err.value.offsets == [-1, -1, -1, 0, 1, 2]
    assert fb.values(A) == [], "a batch behind the refused first batch was appended"
    assert fb.requests_with("a1") == [] and fb.requests_with("a2") == []
    (probe,) = fb.requests_with("b0")
    assert [v for _, v, _, _ in fb._sent(probe)] == ["a0", "b0"]
    (later,) = fb.requests_with("b1")
    assert fb.answered_before(probe, later), "B's second batch was sent before its probe was answered"
    # now confirmed: A's batches are pipelined after one acknowledged probe, in order
    assert await producer.produce([(A, batch("a1")), (A, batch("a2")), (A, batch("a3"))]) == [0, 1, 2]
    assert fb.values(A) == ["a1", "a2", "a3"]


async def test_a_forgotten_producer_takes_a_new_id_and_resends_only_what_was_refused() -> None:
    """The broker forgets our producer on A (UNKNOWN_PRODUCER_ID) while B appends the same round.
    The producer takes a new id, sends again only A's batch with sequence 0, and every partition's
    sequence starts again at 0 under the new id."""
    fb = FakeBroker()
    producer = await producer_on(fb)
    assert await producer.produce([(A, batch("a0")), (B, batch("b0"))]) == [0, 0]
    assert producer.producer_id == 1
    fb.forgotten.add((A, 1))
    assert await producer.produce([(A, batch("a1")), (B, batch("b1"))]) == [1, 1]
    assert producer.producer_id == 2
    assert fb.values(A) == ["a0", "a1"] and fb.values(B) == ["b0", "b1"]
    assert [(e.producer_id, e.sequence) for e in fb.logs[A].entries] == [(1, 0), (2, 0)]
    assert await producer.produce([(B, batch("b2"))]) == [2]
    assert [(e.producer_id, e.sequence) for e in fb.logs[B].entries] == [(1, 0), (1, 1), (2, 0)]


async def test_a_producer_refused_mid_window_takes_a_new_id_probes_and_delivers_once() -> None:
    """Pipelined batches on A are refused as out of sequence (the broker lost our state): the
    producer drops the id, takes a new one, probes A with sequence 0 alone, then pipelines the rest
    from there; every batch is appended once, in order."""
    fb = FakeBroker()
    producer = await producer_on(fb)
    assert await producer.produce([(A, batch("a0"))]) == [0]
    fb.forgotten.add((A, 1))
    fb.forgotten_code = OUT_OF_ORDER_SEQUENCE_NUMBER
    fb.events.clear()
    assert await producer.produce([(A, batch("a1")), (A, batch("a2")), (A, batch("a3"))]) == [1, 2, 3]
    assert producer.producer_id == 2
    assert [(e.producer_id, e.sequence) for e in fb.logs[A].entries] == [(1, 0), (2, 0), (2, 1), (2, 2)]
    _refused, probe = fb.requests_with("a1")  # refused under id 1, then the probe under id 2
    (later,) = [n for n in fb.requests_with("a2") if n > probe]
    assert fb.answered_before(probe, later), "pipelined on a partition the new producer id never wrote to"
