"""MirrorSink over the producer and the fake broker: a put sees only acknowledged prefixes and
failures, never the producer's re-sends; a failure says whether the task may retry in place."""

from __future__ import annotations

import pytest

from mm2py.client.producer import ProducerConfig
from mm2py.connectors.mirror_sink import MirrorSink
from mm2py.engine.task_contract import SinkError
from mm2py.protocol.record_codec import Record, build_batch
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
