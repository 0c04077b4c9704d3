"""MirrorSink over the producer and the fake broker: a put sees only acknowledged prefixes and
failures, never the producer's re-sends; a failure says whether the task may retry in place."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mm2py.client.producer import ProducerConfig
from mm2py.connectors.mirror_sink import MirrorSink, PendingPut
from mm2py.connectors.target_limits import TargetLimits
from mm2py.engine.task_contract import SinkError
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.record_codec import Record, assemble_batch, build_batch
from mm2py.protocol.records import RecordBatch
from tests.support.fake_broker import A, B, FakeBroker, producer_on

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path

TS = 1_700_000_000_000


def source(values: list[str], start: int = 0, size: int = 0) -> list[RecordBatch]:
    """Source batches of one record each, at offsets ``start``.. (as a fetch returns them)."""
    return [RecordBatch(build_batch([Record(0, 0, b"k", v.encode() + b"." * size)],
                                    base_offset=start + i, base_timestamp=TS))
            for i, v in enumerate(values)]


async def sink_on(fb: FakeBroker, window: int = 5) -> MirrorSink:
    sink = MirrorSink(await producer_on(fb, ProducerConfig(max_in_flight=window)), lambda t: t)
    assert [d.target_first for d in await sink.put([(A, source(["a0"])), (B, source(["b0"]))])] == [0, 0]
    return sink


async def test_a_lost_answer_is_re_sent_by_the_producer_and_the_put_sees_only_offsets() -> None:
    fb = FakeBroker()
    sink = await sink_on(fb)
    fb.lose_response_of = "a2"
    fb.lost_answer_after = "a4"
    delivered = await sink.put([(A, source(["a1", "a2", "a3", "a4"], start=1))])
    assert [(d.source_first, d.target_first) for d in delivered] == [(i, i) for i in range(1, 5)]
    assert fb.values(A) == [f"a{i}" for i in range(5)] and fb.duplicates == 3


async def test_a_failure_in_doubt_asks_for_a_restart_with_the_acknowledged_prefix() -> None:
    """Ten batches in flight, a1's answer lost after the broker appended all ten: the producer's
    re-send is refused (DEEP), and the put fails asking for a restart (the target holds more than
    was acknowledged); B's batches, acknowledged, are delivered."""
    fb = FakeBroker()
    sink = await sink_on(fb, window=10)
    fb.lose_response_of = "a1"
    fb.lost_answer_after = "a10"
    work = [(A, source([f"a{i}" for i in range(1, 11)], start=1)), (B, source(["b1"], start=1))]
    with pytest.raises(SinkError) as err:
        await sink.put(work)
    assert err.value.restart and "ResendRefusedError" in str(err.value)
    assert [(d.source, d.target_first) for d in err.value.delivered] == [(B, 1)]


async def test_a_batch_surely_refused_lets_the_task_retry_in_place() -> None:
    """The broker refuses a partition's first batch, the only one out, sent once: the target
    holds exactly the acknowledged prefix, so the put fails without asking for a restart."""
    fb = FakeBroker()
    sink = MirrorSink(await producer_on(fb), lambda t: t)
    with pytest.raises(SinkError) as err:
        await sink.put([(A, source(["a0"], size=2000) + source(["a1"], start=1)), (B, source(["b0"]))])
    assert not err.value.restart
    assert [(d.source, d.target_first) for d in err.value.delivered] == [(B, 0)]
    delivered = await sink.put([(A, source(["a0", "a1"]))])  # put() let A produce again
    assert [d.target_first for d in delivered] == [0, 1] and fb.values(A) == ["a0", "a1"]


def records(values: list[str], start: int = 0, size: int = 300) -> RecordBatch:
    """One source batch of ``values`` (each padded to ``size`` bytes) at offsets ``start``.."""
    recs = [Record(i, i, b"k", v.encode() + b"." * size) for i, v in enumerate(values)]
    return RecordBatch(build_batch(recs, base_offset=start, base_timestamp=TS))


async def test_a_batch_over_the_target_topics_limit_goes_as_pieces_each_with_its_source_range() -> None:
    """The fake broker refuses batches over 1000 bytes, as the topic's configuration says: a
    3 KB source batch is produced as pieces under it, in order, their source ranges exact."""
    fb = FakeBroker(max_batch_bytes=1000)
    asked: list[list[str]] = []

    def describe(topics: list[str]) -> dict[str, int]:
        asked.append(topics)
        return dict.fromkeys(topics, 1000)

    sink = MirrorSink(await producer_on(fb), lambda t: t, limits=TargetLimits(describe))
    delivered = await sink.put([(A, [records([f"a{i}" for i in range(10)], start=5)])])
    assert len(delivered) > 2 and all(d.split and d.size <= 1000 for d in delivered)
    assert [(d.source_first, d.source_last) for d in delivered] == [
        (f, n - 1) for f, n in zip([d.source_first for d in delivered],
                                   [d.source_first for d in delivered[1:]] + [15], strict=True)]
    assert delivered[0].source_first == 5 and delivered[-1].source_next == 15
    assert all(d.source_next == d.source_last + 1 for d in delivered)
    assert fb.values(A) == [f"a{d.source_first - 5}" for d in delivered]  # each piece's first record
    assert asked == [["t"]]  # asked once, before the first produce to the topic


async def test_a_refusal_the_configuration_cannot_explain_halves_the_limit_until_batches_pass() -> None:
    """The topic cannot be described: the first produce is refused as too large (MESSAGE_TOO_LARGE,
    the only batch out: the task may retry in place), and each retry halves the refused size."""
    fb = FakeBroker(max_batch_bytes=1000)

    def describe(topics: list[str]) -> dict[str, int]:
        raise RuntimeError("not allowed")

    sink = MirrorSink(await producer_on(fb), lambda t: t, limits=TargetLimits(describe))
    work = [(A, [records([f"a{i}" for i in range(10)])])]
    refusals = 0
    while True:
        try:
            delivered = await sink.put(work)
            break
        except SinkError as exc:
            assert not exc.restart and exc.kind == "MESSAGE_TOO_LARGE on t-0"
            refusals += 1
            assert refusals < 5
    assert refusals == 2  # ~3.2 KB refused, then ~1.6 KB pieces refused: 800-byte pieces pass
    assert sum(d.records for d in delivered) == 10 and delivered[-1].source_next == 10


async def test_puts_wait_in_order_for_a_limit_being_asked_for() -> None:
    """The first put to a topic waits for its limit, and a put submitted meanwhile waits behind it
    (even one to a topic whose limit is known): the order per partition holds."""
    fb = FakeBroker(max_batch_bytes=100_000)
    asked, answer = threading.Event(), threading.Event()

    def describe(topics: list[str]) -> dict[str, int]:
        asked.set()
        answer.wait(10)
        return dict.fromkeys(topics, 100_000)

    sink = MirrorSink(await producer_on(fb), lambda t: t, limits=TargetLimits(describe))
    first = sink.submit([(A, source(["a0", "a1"]))])
    second = sink.submit([(A, source(["a2"], start=2))])
    assert await asyncio.to_thread(asked.wait, 10)  # the limit is being asked for: nothing sent
    assert not first.done() and not second.done() and fb.values(A) == []
    answer.set()
    await first.wait()
    await second.wait()
    assert [d.target_first for d in [*first.result(), *second.result()]] == [0, 1, 2]
    assert fb.values(A) == ["a0", "a1", "a2"]


async def test_a_put_that_cannot_be_prepared_fails_every_put_after_it() -> None:
    """A batch to be split whose records do not parse (its CRC right): its put fails, and so does
    every put after it, sent nothing, as if it had failed the task at once (nothing after a gap)."""
    fb = FakeBroker(max_batch_bytes=1000)
    corrupt = RecordBatch(assemble_batch(b"\xff" * 3000, records_count=10, attributes=0, last_offset_delta=9,
                                         base_offset=0, base_timestamp=TS, max_timestamp=TS, producer_id=-1,
                                         producer_epoch=-1, base_sequence=-1, partition_leader_epoch=-1))
    limits = TargetLimits(lambda ts: dict.fromkeys(ts, 1000))
    sink = MirrorSink(await producer_on(fb), lambda t: t, limits=limits)
    first = sink.submit([(A, [corrupt])])
    second = sink.submit([(A, source(["a10"], start=10))])
    await first.wait()
    await second.wait()
    third = sink.submit([(A, source(["a11"], start=11))])
    await third.wait()
    for put in (first, second, third):
        with pytest.raises(CorruptBatchError):
            put.result()
    assert fb.values(A) == []


async def test_a_sink_that_asked_its_limits_ahead_hands_its_first_put_over_at_once() -> None:
    """learn_ahead (the task's start): once answered, the first put goes to the producer at once
    (not deferred behind a question), and nothing is asked again."""
    fb = FakeBroker(max_batch_bytes=100_000)
    asked: list[list[str]] = []

    def describe(topics: list[str]) -> dict[str, int]:
        asked.append(sorted(topics))
        return dict.fromkeys(topics, 100_000)

    sink = MirrorSink(await producer_on(fb), lambda t: t, limits=TargetLimits(describe))
    sink.learn_ahead([A, B])
    topics = sorted({A.topic, B.topic})
    for _ in range(500):
        if not sink.limits or not sink.limits.unknown(topics):
            break
        await asyncio.sleep(0.01)
    put = sink.submit([(A, source(["a0"])), (B, source(["b0"]))])
    assert isinstance(put, PendingPut)
    await put.wait()
    assert [d.target_first for d in put.result()] == [0, 0] and asked == [topics]
