"""TaskRunner logic with in-memory parts over real batch bytes (no broker: the pipeline's rules)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence

import pytest

from mm2py.engine.losses import Alarm, MirrorAlarmError, Policy
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.engine.task import TaskRunner
from mm2py.engine.task_contract import Delivered, Polled, RefusedRecord, SinkError, TaskSpec, TaskState
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from tests.support.memory_task import TP, Log, MemoryProgress, MemorySink, MemorySource, batch, values

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path


def expected(*ranges: range) -> list[bytes]:
    return [f"v{o}".encode() for r in ranges for o in r]


def run(runner: TaskRunner, until: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    return asyncio.run(runner.run_until(until, timeout=10))


def make(logs: Mapping[TopicPartition, Log], sink: MemorySink | None = None,
         source: MemorySource | None = None, ckpt: MemoryProgress | None = None) -> TaskRunner:
    return TaskRunner(
        TaskSpec(None, 0, tuple(logs)), source or MemorySource(logs), sink or MemorySink(),
        ckpt or MemoryProgress(), offset_lag_max=5, commit_interval=0, retry_backoff=0,
    )


def test_everything_arrives_once_in_order_and_syncs_translate_exactly() -> None:
    # batches at 0..9, 10..14, markers at 15, 16..19, aborted 20..24 + marker 25, 26..29, marker 30
    log = Log([batch(0, 10), batch(10, 5), batch(16, 4), batch(26, 4)], end=31)
    sink, ckpt = MemorySink(), MemoryProgress()
    runner = make({TP: log}, sink=sink, ckpt=ckpt)
    assert run(runner, {TP: 31}) == {TP: 31}
    assert values(sink) == expected(range(0, 15), range(16, 20), range(26, 30))
    assert ckpt.stored[TP] == Position(31, 23)
    store = OffsetSyncStore()
    for s in ckpt.syncs:
        store.add(s)
    mapping = {0: 0, 9: 9, 14: 14, 15: 15, 16: 15, 19: 18, 20: 19, 25: 19, 26: 19, 29: 22, 30: 23, 31: 23}
    for upstream, downstream in mapping.items():
        assert store.translate(TP, upstream, downstream_end=23) == downstream, upstream


def test_a_failed_produce_rewinds_to_the_last_acknowledged_batch() -> None:
    log = Log([batch(0, 3), batch(3, 3), batch(6, 3), batch(9, 3)], end=12)
    sink = MemorySink(fail_on_put={1, 2})
    runner = make({TP: log}, sink=sink)
    run(runner, {TP: 12})
    assert values(sink) == expected(range(0, 12))  # nothing lost, nothing twice
    assert runner.metrics.sink_failures == 2


def test_a_produce_failure_that_needs_the_targets_tail_fails_the_task_after_counting_the_prefix() -> None:
    """A failure the sink cannot retry in place (the producer's re-send was refused: what the
    target holds must be read from it) is not retried: the task fails, so that its restart
    resumes from the target's tail; what was acknowledged before it still counts and is committed."""
    log = Log([batch(0, 3), batch(3, 3), batch(6, 3), batch(9, 3)], end=12)
    sink, ckpt = MemorySink(fail_on_put={1}, restart=True), MemoryProgress()
    runner = make({TP: log}, sink=sink, ckpt=ckpt)

    async def go() -> None:
        await asyncio.wait_for(runner.run(asyncio.Event()), 5)  # retrying in place never ends

    with pytest.raises(SinkError):
        asyncio.run(go())
    assert runner.state == "FAILED" and sink.puts == 1, "retried in place"
    assert values(sink) == expected(range(0, 3))
    assert ckpt.stored[TP].source == 3 and runner.metrics.sink_failures == 1


def test_a_corrupt_batch_fails_the_task_and_is_never_forwarded() -> None:
    log = Log([batch(0, 5), batch(5, 5), batch(10, 5)], end=15)
    sink, ckpt = MemorySink(), MemoryProgress()
    runner = make({TP: log}, sink=sink, source=MemorySource({TP: log}, corrupt_at=7, per_fetch=1),
                  ckpt=ckpt)

    async def go() -> None:
        await runner.run(asyncio.Event())

    with pytest.raises(CorruptBatchError):
        asyncio.run(go())
    assert runner.state == "FAILED" and "bad CRC" in (runner.trace or "")
    assert values(sink) == expected(range(0, 5))  # up to the last good batch
    assert ckpt.stored[TP].source == 5  # the position stays before the corrupt batch


def test_task_states_are_an_enum_that_reads_as_the_strings_status_has_always_shown() -> None:
    log = Log([batch(0, 3)], end=3)
    runner = make({TP: log})
    assert runner.state is TaskState.UNASSIGNED
    run(runner, {TP: 3})
    assert runner.state is TaskState.STOPPED
    # REST bodies, status lines and metrics labels carry the value, as the bare strings did
    assert json.dumps({"state": runner.state}) == '{"state": "STOPPED"}'
    assert f"{runner.state}" == str(runner.state) == "STOPPED"
    assert {s.value for s in TaskState} == {"UNASSIGNED", "RUNNING", "FAILED", "PAUSED", "STOPPED"}


def test_resume_from_stored_progress_and_assignment_changes_keep_positions() -> None:
    other = TopicPartition("orders", 1)
    logs = {TP: Log([batch(0, 4), batch(4, 4)], end=8), other: Log([batch(0, 6)], end=6)}
    ckpt = MemoryProgress({TP: Position(4, None)})
    sink = MemorySink()
    runner = make({TP: logs[TP]}, sink=sink, source=MemorySource(logs), ckpt=ckpt)
    run(runner, {TP: 8})
    assert values(sink) == expected(range(4, 8))  # resumed at the stored position
    runner.assign([TP, other])
    run(runner, {TP: 8, other: 6})
    assert values(sink, other) == expected(range(0, 6))
    assert values(sink) == expected(range(4, 8))  # the kept partition was not restarted
    runner.assign([other])
    run(runner, {other: 6})
    assert runner.partitions == (other,)


def test_a_fetch_made_for_an_older_position_is_not_applied() -> None:
    """Unassigned and assigned again at a lower stored position while a fetch was in flight:
    the in-flight result must not be delivered (it would skip the offsets in between)."""
    log = Log([batch(0, 50), batch(50, 50), batch(100, 5)], end=105)
    runner = make({TP: log})
    run(runner, {TP: 50})
    runner._pos.start(TP, 40, None, None)  # re-assigned from an older commit
    stale = Polled([batch(100, 5)], 105, 105, fetch_offset=100)
    assert runner._advance({TP: stale}) == ([], {})
    assert runner._pos.fetch_of(TP) == 40
    fresh = Polled([batch(0, 50)], 50, 105, fetch_offset=40)
    work, ends = runner._advance({TP: fresh})
    assert [b.base_offset for _, bs in work for b in bs] == [0] and ends == {TP: 50}


def test_release_commits_the_partitions_it_gives_up() -> None:
    other = TopicPartition("orders", 1)
    logs = {TP: Log([batch(0, 4)], end=4), other: Log([batch(0, 6)], end=6)}
    ckpt = MemoryProgress()
    runner = TaskRunner(TaskSpec(None, 0, (TP, other)), MemorySource(logs), MemorySink(), ckpt,
                        offset_lag_max=5, commit_interval=3600, retry_backoff=0)

    async def go() -> bool:
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        while runner.positions().get(other) != 6:
            await asyncio.sleep(0.01)
        commits_before = ckpt.commits
        released = await runner.release([TP], timeout=5)
        assert ckpt.commits == commits_before + 1  # the hand-over commit, not the periodic one
        stop.set()
        await task
        return released

    assert asyncio.run(go()) is True
    assert runner.partitions == (TP,)
    assert ckpt.stored[other] == Position(6, 6)


class CountingProgress(MemoryProgress):
    def __init__(self, stored: dict[TopicPartition, Position] | None = None) -> None:
        super().__init__(stored)
        self.loads = 0

    def load(self) -> dict[TopicPartition, Position]:
        self.loads += 1
        return super().load()


def test_a_seeded_partition_starts_at_the_handed_over_position_without_reading_progress() -> None:
    """A lease hand-over: the stored progress is older than the seed; the seed wins and the
    progress topic is not read at all."""
    log = Log([batch(0, 4), batch(4, 4), batch(8, 4)], end=12)
    ckpt = CountingProgress({TP: Position(0, None)})
    sink = MemorySink()
    runner = make({TP: log}, sink=sink, ckpt=ckpt)
    runner.seed({TP: Position(8, 0)})
    run(runner, {TP: 12})
    assert values(sink) == expected(range(8, 12))
    assert ckpt.loads == 0
    assert runner.committed_positions()[TP] == Position(12, 4)


def test_an_unseeded_partition_still_reads_progress() -> None:
    other = TopicPartition("orders", 1)
    logs = {TP: Log([batch(0, 4)], end=4), other: Log([batch(0, 2), batch(2, 4)], end=6)}
    ckpt = CountingProgress({other: Position(2, None)})
    sink = MemorySink()
    runner = make(logs, sink=sink, source=MemorySource(logs), ckpt=ckpt)
    runner.seed({TP: Position(0, 0)})
    run(runner, {TP: 4, other: 6})
    assert ckpt.loads == 1
    assert values(sink, other) == [f"v{o}".encode() for o in range(2, 6)]


def test_a_slow_commit_does_not_hold_up_delivery_and_commits_never_go_backwards() -> None:
    import threading
    import time

    class PacedSink(MemorySink):
        """Each put takes a millisecond (a target round trip): the loop waits, and a commit thread
        gets to run meanwhile. Without it the loop could finish every put within one GIL switch
        interval, before the commit's thread ever ran, and nothing could overlap."""

        async def put(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> list[Delivered]:
            await asyncio.sleep(0.001)
            return await super().put(work)

    log = Log([batch(i * 2, 2) for i in range(60)], end=120)
    sink = PacedSink()
    overlapped: list[int] = []
    written: list[int] = []
    lock = threading.Lock()

    class SlowProgress(MemoryProgress):
        def commit(self, positions: Mapping[TopicPartition, Position]) -> None:
            with lock:
                puts = sink.puts
                time.sleep(0.05)  # the target is slow to acknowledge the progress record
                overlapped.append(sink.puts - puts)
                if TP in positions:
                    written.append(positions[TP].source)
            super().commit(positions)

    ckpt = SlowProgress()
    source = MemorySource({TP: log}, per_fetch=1)
    runner = TaskRunner(TaskSpec(None, 0, (TP,)), source, sink, ckpt, offset_lag_max=5,
                        commit_interval=0, retry_backoff=0)

    async def go() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        while runner.positions().get(TP) != 120:
            await asyncio.sleep(0.001)
        stop.set()
        await task

    asyncio.run(go())
    assert values(sink) == expected(range(0, 120))
    # produces went on while a commit was being written: more puts landed during one commit than
    # the loop keeps in flight (a commit awaited by the loop lets at most those finish)
    assert max(overlapped) > runner.pipeline_depth
    assert written == sorted(written) and written[-1] == 120  # forced last commit, never backwards


class TargetLeaderLate(MemorySink):
    """A target partition whose leader is not ready for the first ``late`` asks of its end (a
    just-created topic): ``end_offsets`` leaves it out meanwhile, as the real sink does."""

    def __init__(self, slow: TopicPartition, late: int) -> None:
        super().__init__()
        self.slow, self.late = slow, late
        self.asked: list[list[TopicPartition]] = []
        self.first_put: list[TopicPartition] | None = None

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        self.asked.append(list(partitions))
        ends = await super().end_offsets(partitions)
        if len(self.asked) <= self.late:
            ends.pop(self.slow, None)
        return ends

    async def put(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> list[Delivered]:
        if self.first_put is None:
            self.first_put = [tp for tp, _ in work]
        return await super().put(work)


def test_a_partition_whose_target_is_not_ready_starts_later_and_holds_up_no_other() -> None:
    slow = TopicPartition("orders", 1)
    logs = {TP: Log([batch(0, 4), batch(4, 4)], end=8), slow: Log([batch(0, 6)], end=6)}
    sink, ckpt = TargetLeaderLate(slow, late=2), MemoryProgress()
    runner = make(logs, sink=sink, ckpt=ckpt)
    run(runner, {TP: 8, slow: 6})
    assert values(sink) == expected(range(8)) and values(sink, slow) == expected(range(6))
    # the ready partition was mirrored at once; later asks were for the deferred partition alone
    assert sink.first_put == [TP]
    assert sink.asked == [[TP, slow], [slow], [slow]]
    # its start was committed (seeded) only with a real target end, never a made-up one
    assert ckpt.stored[slow].target is not None


def test_a_stored_topic_id_is_handed_to_the_source_and_committed_again_with_the_position() -> None:
    logs = {TP: Log([batch(0, 4), batch(4, 4)], end=8)}
    source, ckpt = MemorySource(logs), MemoryProgress({TP: Position(4, None, "tid-1")})
    run(make(logs, source=source, ckpt=ckpt), {TP: 8})
    assert source.expected == {TP.topic: "tid-1"}  # the source compares it with the topic's id now
    assert ckpt.stored[TP] == Position(8, 4, "tid-1")


@pytest.mark.parametrize("policy", ["fail", "skip"])
def test_a_target_that_ends_below_the_committed_end_is_named_before_anything_is_produced(policy: str) -> None:
    """The remote partition was truncated, or deleted and created again, while no task ran: the tail
    reconciler finds it ending at 0, below the committed 40 (``target.truncated``)."""
    logs = {TP: Log([batch(0, 4), batch(4, 4)], end=8)}

    async def reconcile(tp: TopicPartition, stored: Position,
                        end: int | None) -> tuple[Position, list[Delivered]]:
        return Position(stored.source, 0), []

    sink = MemorySink()
    runner = TaskRunner(TaskSpec(None, 0, (TP,)), MemorySource(logs), sink,
                        MemoryProgress({TP: Position(4, 40)}), commit_interval=0, retry_backoff=0,
                        reconcile=reconcile, alarms={Alarm.TARGET_TRUNCATED: Policy(policy)})
    if policy == "fail":
        with pytest.raises(MirrorAlarmError, match=r"target\.truncated"):
            run(runner, {TP: 8})
        assert values(sink) == [] and runner.metrics.audit_target_truncated == 1
        return
    run(runner, {TP: 8})  # skip: counted, and the mirror goes on where the target now ends
    assert values(sink) == expected(range(4, 8)) and runner.metrics.audit_target_truncated == 1
    assert runner.metrics.audit_verified_batches >= 1 and runner.committed_positions()[TP].target == 4


class RefusingSink(MemorySink):
    """A target that refuses the record at ``refused`` of TP even alone: as the real sink does, the
    batches before it are produced, TP holds there (nothing later of it) until ``recover``."""

    def __init__(self, refused: int) -> None:
        super().__init__()
        self.refused = refused
        self.held = False

    async def put(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> list[Delivered]:
        refused: list[RefusedRecord] = []
        held = self.held
        kept: list[tuple[TopicPartition, list[RecordBatch]]] = []
        for tp, batches in work:
            if tp == TP and not held and any(b.base_offset == self.refused for b in batches):
                batches = [b for b in batches if b.base_offset < self.refused]
                refused.append(RefusedRecord(TP, "east.orders", self.refused, 2_000_000, 1_048_588))
                held = self.held = True
            elif tp == TP and held:
                batches = []
            kept.append((tp, batches))
        delivered = await super().put(kept)
        if held:
            raise SinkError("held", delivered, refused=refused)
        return delivered

    def recover(self) -> None:
        self.held = False


@pytest.mark.parametrize("policy", ["fail", "skip"])
def test_a_record_the_target_refuses_alone_holds_its_partition_or_is_left_out(policy: str) -> None:
    """The record at 3 is refused even alone: ``fail`` holds TP right before it (its position stays
    at 3, its sibling goes on), ``skip`` leaves it out and the offset syncs map past it exactly."""
    sibling = TopicPartition("orders", 1)
    logs = {TP: Log([batch(0, 3), batch(3, 1), batch(4, 3)], end=7),
            sibling: Log([batch(i, 1) for i in range(10)], end=10)}  # ten fetches: flowing after it
    sink, ckpt = RefusingSink(3), MemoryProgress()
    runner = TaskRunner(TaskSpec(None, 0, tuple(logs)), MemorySource(logs, per_fetch=1), sink, ckpt,
                        offset_lag_max=5, commit_interval=0, retry_backoff=0,
                        alarms={Alarm.RECORD_TOO_LARGE: Policy(policy)})


    async def mirror(done: Callable[[], bool]) -> None:
        stop = asyncio.Event()
        running = asyncio.create_task(runner.run(stop))
        while not done() and not running.done():
            await asyncio.sleep(0.001)
        stop.set()
        await running

    acked = runner.positions
    if policy == "fail":
        held = lambda: bool(runner.held_partitions) and acked().get(sibling) == 10  # noqa: E731
        asyncio.run(asyncio.wait_for(mirror(held), 10))
        assert runner.held_partitions == [str(TP)] and acked()[TP] == 3 and values(sink) == expected(range(3))
        assert TP not in runner._wanted(None)
    else:
        asyncio.run(asyncio.wait_for(mirror(lambda: acked().get(TP) == 7 and acked().get(sibling) == 10), 10))
        assert values(sink) == expected(range(0, 3), range(4, 7)) and runner.held_partitions == []
        store = OffsetSyncStore()
        for s in ckpt.syncs:
            store.add(s)
        assert [store.translate(TP, u, downstream_end=6) for u in (2, 4, 6, 7)] == [2, 3, 5, 6]
    assert values(sink, sibling) == expected(range(0, 10))
    assert runner.metrics.audit_records_too_large == 1
    [alarm] = [a for a in (e.describe() for e in runner.losses.recent)]
    assert "orders-0" in alarm and "offset 3" in alarm and "2000000 bytes" in alarm
    assert "1048588 bytes target topic east.orders" in alarm
