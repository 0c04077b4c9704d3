"""What a task notices about records lost, doubled or mixed on the way, and what it does about each
(pure).

mm2py copies whole batches, so a task always knows two numbers per partition: the next source
offset it fetches from, and the target offset its next batch must land at (the end of the last
batch the target acknowledged). Every way the two logs can stop lining up shows in them, at the
cost of one comparison per acknowledged batch:

``SOURCE_DELETED``
    The source answered OFFSET_OUT_OF_RANGE and its log now starts past the task's position:
    retention or DeleteRecords removed offsets before they were mirrored (which ones is logged
    and counted in ``offsets_lost_to_retention``).
``SOURCE_TRUNCATED``
    The source's log now ends below the task's position: the partition was truncated (an unclean
    leader election) or the topic was deleted and created again. What the source holds at those
    offsets now is not what was mirrored from them.
``SOURCE_RECREATED``
    The source topic's id changed under the task: it was deleted and created again (the new one
    may already hold as many offsets as the old: its offsets say nothing). ``skip`` mirrors the
    new topic from its start, after the old one's records.
``TARGET_TRUNCATED``
    The target acknowledged a batch at a lower offset than the end of the last one, or, at a start
    from committed progress, ends below the committed target end: the target partition was
    truncated, or the remote topic was deleted and created again.
``FOREIGN_RECORDS``
    The target acknowledged a batch at a higher offset than the end of the last one: records of
    some other producer lie between the mirror's.
``RECORD_TOO_LARGE``
    A record the target topic refuses even in a batch of its own (larger than its
    ``max.message.bytes``; larger batches are split, ``connectors/outgoing.fit``). This alarm
    concerns one partition: ``fail`` holds that partition right before the record (its position
    stays there, the task's other partitions go on) until the flow is restarted; ``skip`` leaves
    the record out and mirrors on from the next one.

Each has a policy per flow (``mm2py.alarm.<name>``, :data:`SETTINGS`): ``fail`` (the task stops
with :class:`MirrorAlarmError` and stays FAILED until the flow is restarted, so two incarnations
of a topic are never mixed) or ``skip`` (the alarm is counted and logged, and the mirror goes on
from where the logs now stand). Defaults: ``fail`` for the truncations and a re-created source,
``skip`` for retention and foreign records (a remote topic others also write to is a setup some
users choose).

Batches acknowledged exactly where they were expected are counted as verified.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mm2py.engine.task_contract import TaskError, TaskMetrics
from mm2py.protocol.types import TopicPartition

__all__ = [
    "ALARM_COUNTERS", "DEFAULT_POLICIES", "SETTINGS", "Alarm", "AlarmEvent", "LossWatch", "MirrorAlarmError",
    "Policy", "alarm_counts", "policies_of", "recent_alarms",
]

log = logging.getLogger(__name__)


class Alarm(enum.StrEnum):
    SOURCE_DELETED = "source.deleted"
    SOURCE_TRUNCATED = "source.truncated"
    SOURCE_RECREATED = "source.recreated"
    TARGET_TRUNCATED = "target.truncated"
    FOREIGN_RECORDS = "target.foreign"
    RECORD_TOO_LARGE = "target.too.large"


class Policy(enum.StrEnum):
    #: the task stops and stays FAILED until its flow is restarted
    FAIL = "fail"
    #: counted and logged; the mirror goes on
    SKIP = "skip"


DEFAULT_POLICIES: Mapping[Alarm, Policy] = {
    Alarm.SOURCE_DELETED: Policy.SKIP,
    Alarm.SOURCE_TRUNCATED: Policy.FAIL,
    Alarm.SOURCE_RECREATED: Policy.FAIL,
    Alarm.TARGET_TRUNCATED: Policy.FAIL,
    Alarm.FOREIGN_RECORDS: Policy.SKIP,
    Alarm.RECORD_TOO_LARGE: Policy.FAIL,
}

#: each alarm's flow setting
SETTINGS: Mapping[Alarm, str] = {a: f"mm2py.alarm.{a.value}" for a in Alarm}


def policies_of(settings: object) -> dict[Alarm, Policy]:
    """Each alarm's policy as a flow's settings give it (the field of ``mm2py.alarm.<name>``:
    ``alarm_<name>`` with dots as underscores)."""
    return {a: Policy(getattr(settings, f"alarm_{a.value.replace('.', '_')}")) for a in Alarm}

#: each alarm's counter in :class:`TaskMetrics`
ALARM_COUNTERS: Mapping[Alarm, str] = {
    Alarm.SOURCE_DELETED: "audit_source_deleted",
    Alarm.SOURCE_TRUNCATED: "audit_source_truncated",
    Alarm.SOURCE_RECREATED: "audit_source_recreated",
    Alarm.TARGET_TRUNCATED: "audit_target_truncated",
    Alarm.FOREIGN_RECORDS: "audit_foreign_records",
    Alarm.RECORD_TOO_LARGE: "audit_records_too_large",
}


def alarm_counts(metrics: TaskMetrics) -> dict[str, int]:
    """The alarms a task raised so far, by name (``target.foreign``: 2); those never raised left out."""
    return {alarm.value: n for alarm, name in ALARM_COUNTERS.items() if (n := getattr(metrics, name))}


def recent_alarms(task: object, last: int = 5) -> list[str]:
    """A task's newest alarms in words, where it keeps them (a ``TaskRunner``'s :class:`LossWatch`;
    a Spark lease's view has none)."""
    return [e.describe() for e in getattr(getattr(task, "losses", None), "recent", ())][-last:]


@dataclass(frozen=True)
class AlarmEvent:
    """One alarm on source partition ``tp``: where the task stood (``expected``) and what it found
    (``found``): source offsets for the source alarms, target offsets for the target ones."""

    alarm: Alarm
    tp: TopicPartition
    expected: int
    found: int
    #: wall-clock seconds
    at: float
    #: RECORD_TOO_LARGE: the target topic and its limit (``expected`` is the record's offset,
    #: ``found`` the size of a batch holding it alone)
    topic: str = ""
    limit: int = -1
    #: a target alarm found by asking the idle partition's end (not at a batch's acknowledgement)
    idle: bool = False

    def describe(self) -> str:
        tp, a, b = self.tp, self.expected, self.found
        if self.alarm is Alarm.SOURCE_DELETED:
            return f"{tp}: source offsets {a}..{b - 1} ({b - a}) were deleted before they were mirrored"
        if self.alarm is Alarm.SOURCE_RECREATED:
            return (f"{tp}: the source topic was deleted and created again (a new topic id) while the "
                    f"mirror stood at offset {a}; the new one starts at {b}")
        if self.alarm is Alarm.SOURCE_TRUNCATED:
            return (f"{tp}: the source log now ends at {b}, below the mirror's position {a} (truncated, "
                    f"or the topic deleted and created again)")
        if self.alarm is Alarm.TARGET_TRUNCATED:
            return (f"{tp}: the target partition ends at {b}, below the end of the mirror's last batch, "
                    f"{a} (the remote partition truncated, or deleted and created again)")
        if self.idle:
            return (f"{tp}: the idle remote partition ends at {b}, past the end of the mirror's last "
                    f"batch, {a}: target offsets {a}..{b - 1} ({b - a}) hold records the mirror did "
                    f"not write")
        if self.alarm is Alarm.RECORD_TOO_LARGE:
            return (f"{tp}: the record at offset {a} is {b} bytes in a batch of its own, over the "
                    f"{self.limit} bytes target topic {self.topic} accepts (max.message.bytes)")
        return (f"{tp}: the target wrote the mirror's next batch at offset {b}: target offsets "
                f"{a}..{b - 1} ({b - a}) hold records the mirror did not write")


class MirrorAlarmError(TaskError):
    """An alarm whose policy is ``fail``: the task stops and is not restarted by itself."""

    def __init__(self, event: AlarmEvent) -> None:
        super().__init__(f"{event.alarm.value} (policy fail): {event.describe()}")
        self.event = event


class LossWatch:
    """One task's alarms: counted in its :class:`TaskMetrics`, the newest kept for its status."""

    def __init__(self, task: str, metrics: TaskMetrics, policies: Mapping[Alarm, Policy] | None = None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.task = task
        self.metrics = metrics
        self.policies = {**DEFAULT_POLICIES, **(policies or {})}
        self.wall_clock = wall_clock
        #: the newest alarms, newest last
        self.recent: deque[AlarmEvent] = deque(maxlen=16)

    def source_reset(self, tp: TopicPartition, position: int, reset_to: int,
                     recreated: bool = False) -> None:
        """The source said ``position`` is out of its range (or, ``recreated``, of another topic by
        that name) and the partition goes on at ``reset_to``; raises :class:`MirrorAlarmError`
        under ``fail``."""
        if recreated:
            self._raise(Alarm.SOURCE_RECREATED, tp, position, reset_to)
        elif reset_to > position:
            self.metrics.offsets_lost_to_retention += reset_to - position
            self._raise(Alarm.SOURCE_DELETED, tp, position, reset_to)
        else:
            self._raise(Alarm.SOURCE_TRUNCATED, tp, position, reset_to)

    def target_acked(self, tp: TopicPartition, expected: int | None, found: int) -> MirrorAlarmError | None:
        """The target acknowledged ``tp``'s next batch at ``found``, not at ``expected``, the end of its
        last batch (None: not known yet; the caller counts the batches found where expected). The
        error to raise once the acknowledgement is accounted for, under ``fail``; None otherwise."""
        if expected is None or expected == found:
            return None
        alarm = Alarm.TARGET_TRUNCATED if found < expected else Alarm.FOREIGN_RECORDS
        try:
            self._raise(alarm, tp, expected, found)
        except MirrorAlarmError as exc:
            return exc
        return None

    def target_end(self, tp: TopicPartition, expected: int, end: int) -> MirrorAlarmError | None:
        """An idle partition's remote end is ``end``, not ``expected`` (where the mirror's last
        batch ended): ``target.foreign`` past it, ``target.truncated`` below; the error to raise
        under ``fail``, None otherwise."""
        alarm = Alarm.TARGET_TRUNCATED if end < expected else Alarm.FOREIGN_RECORDS
        try:
            self._raise(alarm, tp, expected, end, idle=True)
        except MirrorAlarmError as exc:
            return exc
        return None

    def record_too_large(self, tp: TopicPartition, topic: str, offset: int, size: int, limit: int) -> Policy:
        """A record of ``tp`` the target refuses even alone: counted, logged and kept for the status;
        the policy says whether its partition holds (``fail``) or the record is left out."""
        event = AlarmEvent(Alarm.RECORD_TOO_LARGE, tp, offset, size, self.wall_clock(), topic, limit)
        self.recent.append(event)
        self.metrics.audit_records_too_large += 1
        policy = self.policies[Alarm.RECORD_TOO_LARGE]
        log.warning("task %s: %s; policy %s: %s", self.task, event.describe(), policy.value,
                    "the partition holds there until its flow is restarted (raise the topic's "
                    "max.message.bytes, or set mm2py.alarm.target.too.large=skip)" if policy is Policy.FAIL
                    else "the record is left out, the partition goes on")
        return policy

    def _raise(self, alarm: Alarm, tp: TopicPartition, expected: int, found: int, idle: bool = False) -> None:
        event = AlarmEvent(alarm, tp, expected, found, self.wall_clock(), idle=idle)
        self.recent.append(event)
        name = ALARM_COUNTERS[alarm]
        setattr(self.metrics, name, getattr(self.metrics, name) + 1)
        policy = self.policies[alarm]
        log.warning("task %s: %s; policy %s%s", self.task, event.describe(), policy.value,
                    ": the task stops until its flow is restarted" if policy is Policy.FAIL else "")
        if policy is Policy.FAIL:
            raise MirrorAlarmError(event)
