"""A task's alarms (mm2py/engine/losses.py) with in-memory parts over real batch bytes: records of
another producer between the mirror's on the target, a target truncated or re-created, a source
log truncated below the mirror's position, source offsets deleted before they were mirrored; each
named, counted, and failing the task or not by its policy."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import pytest

from mm2py.config.settings import FlowSettings
from mm2py.engine.losses import DEFAULT_POLICIES, SETTINGS, Alarm, MirrorAlarmError, Policy, policies_of
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.engine.task import TaskRunner
from mm2py.engine.task_contract import Delivered, Polled, TaskSpec
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from tests.support.memory_task import TP, Log, MemoryProgress, MemorySink, MemorySource, batch, values


class MeddledSink(MemorySink):
    """A target someone else touches just before the mirror's ``at``-th put: ``foreign`` records
    of another producer appended, or (``truncate``) the partition emptied (deleted and created
    again)."""

    def __init__(self, at: int, foreign: int = 0, truncate: bool = False) -> None:
        super().__init__()
        self.at, self.foreign, self.truncate = at, foreign, truncate

    async def put(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> list[Delivered]:
        if self.puts + 1 == self.at:
            log = self.target.setdefault(TP, [])
            if self.truncate:
                log.clear()
            if self.foreign:
                log.append(bytes(batch(10_000, self.foreign)))
        return await super().put(work)


def _runner(sink: MemorySink, source: MemorySource | None = None, log: Log | None = None,
            alarms: Mapping[Alarm, Policy] | None = None,
            progress: MemoryProgress | None = None, verify: bool = True) -> TaskRunner:
    log = log or Log([batch(0, 3), batch(3, 3), batch(6, 3), batch(9, 3)], end=12)
    return TaskRunner(TaskSpec(None, 0, (TP,)), source or MemorySource({TP: log}, per_fetch=1), sink,
                      progress or MemoryProgress(), offset_lag_max=100, commit_interval=0, retry_backoff=0,
                      alarms=alarms, verify=verify)


def _run(runner: TaskRunner, until: int = 12) -> None:
    asyncio.run(runner.run_until({TP: until}, timeout=10))


def test_batches_written_where_the_last_one_ended_are_verified_and_raise_nothing() -> None:
    runner = _runner(MemorySink())
    _run(runner)
    m = runner.metrics
    assert m.audit_verified_batches == 4 and not runner.losses.recent
    assert (m.audit_foreign_records, m.audit_target_truncated, m.audit_source_truncated) == (0, 0, 0)


def test_records_of_another_producer_on_the_target_are_named_and_counted_and_the_mirror_goes_on() -> None:
    sink, progress = MeddledSink(at=3, foreign=2), MemoryProgress()
    runner = _runner(sink, progress=progress)  # 'skip' by default
    _run(runner)
    assert runner.metrics.audit_foreign_records == 1 and runner.metrics.audit_verified_batches == 3
    (event,) = runner.losses.recent
    assert (event.alarm, event.tp, event.expected, event.found) == (Alarm.FOREIGN_RECORDS, TP, 6, 8)
    assert "target offsets 6..7 (2) hold records the mirror did not write" in event.describe()
    # the mirror's records all arrived once, the foreign two between them; the offset syncs still
    # translate every source offset to its record's place on the target
    assert len(values(sink)) == 14
    store = OffsetSyncStore()
    for s in progress.syncs:
        store.add(s)
    assert [store.translate(TP, u, downstream_end=14) for u in (0, 5, 6, 11, 12)] == [0, 5, 8, 13, 14]


def test_foreign_records_fail_the_task_when_the_flow_says_so() -> None:
    runner = _runner(MeddledSink(at=2, foreign=1), alarms={Alarm.FOREIGN_RECORDS: Policy.FAIL})
    with pytest.raises(MirrorAlarmError, match=r"target.foreign \(policy fail\)") as exc:
        _run(runner)
    assert exc.value.event.found == 4 and exc.value.event.expected == 3
    assert runner.metrics.audit_foreign_records == 1


def test_with_verification_off_nothing_is_compared_and_the_mirror_goes_on() -> None:
    """``mm2py.verify.enabled=false`` (for measuring the comparison's cost): a foreign write that
    fails the task under ``fail`` is not looked at, and no batch is counted verified."""
    sink = MeddledSink(at=2, foreign=1)
    runner = _runner(sink, alarms={Alarm.FOREIGN_RECORDS: Policy.FAIL}, verify=False)
    _run(runner)
    m = runner.metrics
    assert (m.audit_verified_batches, m.audit_foreign_records, m.batches) == (0, 0, 4)
    assert not runner.losses.recent and len(values(sink)) == 13
    assert FlowSettings.model_validate({"mm2py.verify.enabled": "false"}).verify_enabled is False
    assert FlowSettings.model_validate({}).verify_enabled is True


def test_a_target_emptied_under_the_mirror_stops_the_task_by_default() -> None:
    sink, progress = MeddledSink(at=3, truncate=True), MemoryProgress()
    runner = _runner(sink, progress=progress)
    with pytest.raises(MirrorAlarmError) as exc:  # run: mirroring for good, as a worker does
        asyncio.run(asyncio.wait_for(runner.run(asyncio.Event()), 10))
    assert runner.state == "FAILED" and "target.truncated" in (runner.trace or "")
    event = exc.value.event
    assert (event.alarm, event.expected, event.found) == (Alarm.TARGET_TRUNCATED, 6, 0)
    assert "below the end of the mirror's last batch, 6" in str(exc.value)
    # the batch the re-created target acknowledged is accounted for before the task stops: what
    # is committed says where the mirror stands on the new target
    assert progress.stored[TP].source == 9 and progress.stored[TP].target == 3


class ResettingSource(MemorySource):
    """A source whose partition answers OFFSET_OUT_OF_RANGE once the task reaches ``at``, going
    on at ``reset_to`` (``recreated``: its topic was deleted and created again instead)."""

    def __init__(self, log: Log, at: int, reset_to: int, recreated: bool = False) -> None:
        super().__init__({TP: log}, per_fetch=1)
        self.at, self.reset_to, self.recreated, self.done = at, reset_to, recreated, False

    async def poll(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, Polled]:
        if positions.get(TP) == self.at and not self.done:
            self.done = True
            return {TP: Polled([], self.reset_to, 12, reset_to=self.reset_to, fetch_offset=self.at,
                               recreated=self.recreated)}
        return await super().poll(positions)


def test_a_source_topic_created_again_stops_the_task_even_when_it_starts_where_the_task_stood() -> None:
    log = Log([batch(0, 3), batch(3, 3), batch(6, 3), batch(9, 3)], end=12)
    runner = _runner(MemorySink(), ResettingSource(log, at=6, reset_to=6, recreated=True), log)
    with pytest.raises(MirrorAlarmError, match=r"deleted and created again .* stood at offset 6"):
        _run(runner)
    assert runner.metrics.audit_source_recreated == 1


def test_under_skip_a_source_topic_created_again_is_mirrored_from_its_start_after_the_old_records() -> None:
    log = Log([batch(0, 3), batch(3, 3), batch(6, 3), batch(9, 3)], end=12)
    sink = MemorySink()
    runner = _runner(sink, ResettingSource(log, at=9, reset_to=0, recreated=True), log,
                     alarms={Alarm.SOURCE_RECREATED: Policy.SKIP})
    _run(runner)
    assert runner.metrics.audit_source_recreated == 1 and runner.metrics.audit_source_truncated == 0
    assert values(sink) == [f"v{o}".encode() for o in (*range(9), *range(12))]


def test_a_source_log_truncated_below_the_position_stops_the_task_by_default() -> None:
    log = Log([batch(0, 3), batch(3, 3), batch(6, 3), batch(9, 3)], end=12)
    runner = _runner(MemorySink(), ResettingSource(log, at=6, reset_to=3), log)
    with pytest.raises(MirrorAlarmError, match="source log now ends at 3, below the mirror's position 6"):
        _run(runner)
    assert runner.metrics.audit_source_truncated == 1


def test_source_offsets_deleted_before_they_were_mirrored_are_counted_and_skipped() -> None:
    log = Log([batch(0, 3), batch(3, 3), batch(6, 3), batch(9, 3)], end=12)
    sink = MemorySink()
    runner = _runner(sink, ResettingSource(log, at=3, reset_to=9), log)
    _run(runner)
    assert runner.metrics.audit_source_deleted == 1 and runner.metrics.offsets_lost_to_retention == 6
    assert values(sink) == [f"v{o}".encode() for o in (0, 1, 2, 9, 10, 11)]
    assert "source offsets 3..8 (6) were deleted" in runner.losses.recent[0].describe()


def test_every_alarm_has_a_setting_and_a_default() -> None:
    assert set(SETTINGS) == set(DEFAULT_POLICIES) == set(Alarm)

    aliases = {f.alias for f in FlowSettings.model_fields.values()}
    assert set(SETTINGS.values()) <= aliases
    assert policies_of(FlowSettings.model_validate({})) == DEFAULT_POLICIES
    assert policies_of(FlowSettings.model_validate({"mm2py.alarm.target.foreign": "fail"}))[
        Alarm.FOREIGN_RECORDS] is Policy.FAIL
