"""What the target refuses, per partition (issue 46 item 2): the rule on its own, then a task whose
target refuses one partition's records (a keyless record into a compacted topic) while its sibling
flows, then takes them again once fixed. In-memory parts over real batch bytes; the same on real
brokers is tests/integration/test_target_refusals.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest

from mm2py.engine.refusals import REFUSAL_BACKOFF_MAX, PartitionRefusals, describe, is_refusal
from mm2py.engine.task import TaskRunner
from mm2py.engine.task_contract import Delivered, SinkError, TaskSpec
from mm2py.protocol import errors_codes as codes
from mm2py.protocol.errors_codes import BrokerError
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from tests.support.memory_task import TP, Log, MemoryProgress, MemorySink, MemorySource, batch, values

SIBLING = TopicPartition("orders", 1)
REMOTE = TopicPartition("east.orders", 0)


def test_a_refused_partition_backs_off_doubling_to_the_cap_and_a_taken_batch_clears_it() -> None:
    r = PartitionRefusals(retry_backoff=0.5)
    waits = []
    for i in range(8):
        refusal = r.failed(TP, REMOTE, codes.INVALID_RECORD, now=100.0 * i, wall=0.0)
        assert refusal is not None and refusal.refusals == i + 1
        waits.append(refusal.retry_at - 100.0 * i)
    assert waits == [0.5, 1, 2, 4, 8, REFUSAL_BACKOFF_MAX, REFUSAL_BACKOFF_MAX, REFUSAL_BACKOFF_MAX]
    assert r.resting(now=700.0 + 9.9) == {TP} and r.resting(now=700.0 + 10.0) == set()
    status = r.refused[TP].status(now=705.0)
    assert status["cause"] == "INVALID_RECORD" and status["refusals"] == 8
    assert status["retry_in_seconds"] == 5.0
    assert "cleanup.policy" in str(status["change"]) and status["target_partition"] == "east.orders-0"
    assert r.taken(TP) is not None and not r.refused and r.taken(TP) is None


def test_a_failure_that_is_not_the_targets_verdict_rests_the_plain_back_off_and_names_nothing() -> None:
    r = PartitionRefusals(retry_backoff=0.5)
    for code in (None, codes.NOT_LEADER_OR_FOLLOWER, codes.MESSAGE_TOO_LARGE):
        assert r.failed(SIBLING, REMOTE, code, now=0.0, wall=0.0) is None
    assert r.resting(0.49) == {SIBLING} and r.resting(0.5) == set() and not r.refused
    # a lane stopped behind a refusal (no broker answer of its own) does not shorten the refusal's rest
    r.failed(TP, REMOTE, codes.TOPIC_AUTHORIZATION_FAILED, now=0.0, wall=0.0)
    r.failed(TP, REMOTE, codes.TOPIC_AUTHORIZATION_FAILED, now=0.0, wall=0.0)  # 1 s now
    r.failed(TP, REMOTE, None, now=0.0, wall=0.0)
    assert r.resting(0.9) == {TP}


@pytest.mark.parametrize(("code", "words"), [
    (codes.INVALID_RECORD, "compacted"), (32, "message.timestamp"), (44, "policy"),
    (codes.TOPIC_AUTHORIZATION_FAILED, "WRITE"), (codes.UNKNOWN_TOPIC_OR_PARTITION, "deleted"),
])
def test_each_refusal_is_named_in_words_with_what_to_change(code: int, words: str) -> None:
    assert is_refusal(code)
    name, meaning, change = describe(code)
    assert name == codes.ERRORS[code].name and words in meaning + change and change


class RefusingTarget(MemorySink):
    """A target that refuses TP's batches with INVALID_RECORD while ``broken``, as the real sink
    reports it: the other partitions' batches of the put are acknowledged, TP's none."""

    def __init__(self, code: int = codes.INVALID_RECORD) -> None:
        super().__init__()
        self.code = code
        self.broken = True
        self.offered: list[int] = []  # the base offset of each put's first TP batch

    async def put(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> list[Delivered]:
        refused = any(tp == TP for tp, _ in work) and self.broken
        for tp, batches in work:
            if tp == TP:
                self.offered.append(batches[0].base_offset)
        delivered = await super().put([(tp, bs) for tp, bs in work if not (refused and tp == TP)])
        if refused:
            cause = BrokerError(self.code, "Compacted topic cannot accept message without key")
            raise SinkError(str(cause), delivered, partitions=[REMOTE],
                            causes={TP: (REMOTE, cause)}) from cause
        return delivered


def _sibling_task(sink: RefusingTarget, now: list[float]) -> TaskRunner:
    """A task of TP (two batches of three) and its SIBLING (ten of one) into ``sink``, on a clock
    the test holds (``now``), retrying after 5 s."""
    logs = {TP: Log([batch(0, 3), batch(3, 3)], end=6),
            SIBLING: Log([batch(i, 1) for i in range(10)], end=10)}
    return TaskRunner(TaskSpec(None, 0, tuple(logs)), MemorySource(logs, per_fetch=1), sink,
                      MemoryProgress(), offset_lag_max=5, commit_interval=0, retry_backoff=5.0,
                      clock=lambda: now[0])


async def _until(running: asyncio.Task[None], done: Callable[[], bool]) -> None:
    while not done():
        assert not running.done(), running.exception()
        await asyncio.sleep(0.001)


def test_a_refused_partition_waits_alone_its_sibling_flows_and_it_resumes_exactly_once_fixed() -> None:
    """The target refuses TP: it is offered once and then rests (the clock is held still) while its
    sibling mirrors ten more fetches, none of them waiting on TP's back-off; the status names the
    cause and what to change. Each retry after the back-off is one offer; once the target takes TP
    again, it resumes where it stopped: every record once and in order, no refusal left."""
    now = [0.0]
    sink = RefusingTarget()
    runner = _sibling_task(sink, now)

    async def mirror() -> None:
        stop = asyncio.Event()
        running = asyncio.create_task(runner.run(stop))

        async def until(done: Callable[[], bool]) -> None:
            await _until(running, done)

        acked = runner.positions
        await until(lambda: acked().get(SIBLING) == 10)
        assert sink.offered == [0], "TP offered again before its back-off ended, or the sibling waited on it"
        [state] = runner.refused_partitions
        assert state["partition"] == str(TP) and state["cause"] == "INVALID_RECORD"
        assert "cleanup.policy" in str(state["change"]) and state["retry_in_seconds"] == 5.0
        now[0] = 5.0  # the back-off is over: one retry, refused again, the next back-off twice as long
        await until(lambda: len(sink.offered) == 2 and runner.refused_partitions[0]["refusals"] == 2)
        assert runner.refused_partitions[0]["retry_in_seconds"] == 10.0
        sink.broken = False  # the remote topic's cleanup.policy set to delete
        now[0] = 15.0
        await until(lambda: acked().get(TP) == 6)
        assert runner.refused_partitions == []
        stop.set()
        await running

    asyncio.run(asyncio.wait_for(mirror(), 30))
    assert sink.offered[:3] == [0, 0, 0]
    assert values(sink) == [f"v{o}".encode() for o in range(6)]
    assert values(sink, SIBLING) == [f"v{o}".encode() for o in range(10)]


def test_too_few_in_sync_replicas_is_waited_for_apart_from_refusals_with_no_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """NOT_ENOUGH_REPLICAS rests TP alone like a refusal, but the status lists it under
    ``waiting_for_target`` (not ``refused_partitions``) and the log names it at info, never as a
    warning; once the target's replicas are back, TP resumes exactly."""
    now = [0.0]
    sink = RefusingTarget(codes.NOT_ENOUGH_REPLICAS)
    runner = _sibling_task(sink, now)

    async def mirror() -> None:
        stop = asyncio.Event()
        running = asyncio.create_task(runner.run(stop))

        async def until(done: Callable[[], bool]) -> None:
            await _until(running, done)

        await until(lambda: runner.positions().get(SIBLING) == 10)
        assert sink.offered == [0] and runner.refused_partitions == []
        [wait] = runner.waiting_for_target
        assert wait["partition"] == str(TP) and wait["cause"] == "NOT_ENOUGH_REPLICAS"
        assert "min.insync.replicas" in str(wait["meaning"]) + str(wait["change"])
        sink.broken = False  # a target broker is back in the ISR
        now[0] = 5.0
        await until(lambda: runner.positions().get(TP) == 6)
        assert runner.waiting_for_target == []
        stop.set()
        await running

    with caplog.at_level("INFO", logger="mm2py.engine.task"):
        asyncio.run(asyncio.wait_for(mirror(), 30))
    assert not [r for r in caplog.records if r.levelno >= 30], "waiting was logged as a failure"
    assert any("NOT_ENOUGH_REPLICAS" in r.getMessage() for r in caplog.records)
    assert runner.metrics.audit_records_too_large == 0 and not runner.losses.recent
    assert values(sink) == [f"v{o}".encode() for o in range(6)]
