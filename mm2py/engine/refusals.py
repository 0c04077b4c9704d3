"""What the target refuses, per partition: the cause in words, what to change, and when to try again.

A target configured unlike its source refuses some partitions' batches for good until someone
changes it: keyless records into a compacted remote topic (``INVALID_RECORD``), timestamps outside
the remote topic's bounds (``INVALID_TIMESTAMP``), a broker policy (``POLICY_VIOLATION``), a
missing WRITE grant (``TOPIC_AUTHORIZATION_FAILED``), a remote topic deleted
(``UNKNOWN_TOPIC_OR_PARTITION``). :class:`PartitionRefusals` is the task's collaborator for them
(pure: the task hands it the clock's readings):

- **ONE_PARTITION_WAITS**: a refused partition rests alone, its back-off doubling from the task's
  retry back-off up to :data:`REFUSAL_BACKOFF_MAX`; its siblings go on at once;
- **RESUMES_BY_ITSELF**: each retry fetches the partition again from what the target acknowledged;
  the first batch the target takes clears the refusal (the target was fixed: a config changed,
  an ACL granted), with no restart and exactly where it stopped;
- **WAITING_IS_NOT_FAILING**: a refusal the target lifts by itself (``NOT_ENOUGH_REPLICAS``: fewer
  in-sync replicas than the remote topic's ``min.insync.replicas``) rests its partition the same
  way, but it is shown as waiting for the target (``waiting_for_target``), logged at info, and
  raises no alarm; so is the target's quota throttling, which the producer honours per broker;
- a failure that is not the target's verdict on the partition (a connection lost, a leader moved,
  a batch too large, which the sink splits) rests the partition for the plain retry back-off and
  is not shown as a refusal.

:func:`describe` names each cause in words and says what to change; :func:`rest_failed` rests a
failed put's partitions and names each refusal in the task's log; the task's status lists the
refused partitions (REST, the operator page, ``/metrics``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any

from mm2py.engine.losses import LossWatch, Policy
from mm2py.engine.task_contract import THROTTLE_KEY, RefusedRecord
from mm2py.engine.task_positions import TaskPositions
from mm2py.protocol import errors_codes as codes
from mm2py.protocol.errors_codes import ERRORS, BrokerError
from mm2py.protocol.types import TopicPartition
from mm2py.retry import Backoff

__all__ = ["REFUSAL_BACKOFF_MAX", "THROTTLED", "PartitionRefusals", "Refusal", "describe",
           "hold_refused", "is_wait", "rest_failed", "waiting_status"]

log = logging.getLogger("mm2py.engine.task")  # named in the task's log

#: a refused partition is tried again at most this long after its last refusal
REFUSAL_BACKOFF_MAX = 10.0

INVALID_TIMESTAMP = 32
POLICY_VIOLATION = 44
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53

#: error code -> (what the refusal means, what to change on the target)
_WORDS: dict[int, tuple[str, str]] = {
    codes.INVALID_RECORD: (
        "the target refused a record as invalid; most often a record without a key written to a "
        "compacted remote topic (cleanup.policy=compact)",
        "set the remote topic's cleanup.policy to delete (or compact,delete with keys), or key the "
        "records at the source"),
    INVALID_TIMESTAMP: (
        "a record's timestamp is outside what the remote topic accepts "
        "(message.timestamp.before.max.ms / message.timestamp.after.max.ms under CreateTime)",
        "widen those two settings on the remote topic, or set its message.timestamp.type to "
        "LogAppendTime"),
    POLICY_VIOLATION: (
        "a policy of the target cluster refused the write",
        "see the target brokers' log for the policy's reason and change the remote topic or the policy"),
    codes.TOPIC_AUTHORIZATION_FAILED: (
        "the mirror's principal may not write to the remote topic",
        "grant WRITE on the remote topic to the principal of the target cluster's connection "
        "(kafka-acls --add --operation Write --topic ...)"),
    CLUSTER_AUTHORIZATION_FAILED: (
        "the mirror's principal may not produce idempotently on the target",
        "grant IDEMPOTENT_WRITE on the target cluster to the principal of its connection"),
    codes.UNKNOWN_TOPIC_OR_PARTITION: (
        "the remote partition does not exist: the remote topic was deleted, or has fewer "
        "partitions than the source",
        "create the remote topic again (the controller does at its next topic refresh when it may "
        "create topics) or add partitions to it"),
}


#: refusals the target lifts by itself: waited for, not failed (WAITING_IS_NOT_FAILING)
_WAITS: dict[int, tuple[str, str]] = {
    codes.NOT_ENOUGH_REPLICAS: (
        "waiting for the target: the remote partition has fewer in-sync replicas than its "
        "min.insync.replicas, so it takes no acks=all write now",
        "nothing, if a target broker is only restarting: the partition goes on by itself once its "
        "replicas are back in sync; else bring the target's brokers back, or lower the remote "
        "topic's min.insync.replicas"),
}
#: the target's quota throttling (per broker), in the same words
THROTTLED = ("THROTTLED",
             "waiting for the target: the broker throttles the mirror's produce requests under a "
             "client quota (producer_byte_rate or request_percentage of its client id or principal)",
             "nothing, if this rate is meant; else raise the quota on the target (kafka-configs "
             "--alter --entity-type clients or users --add-config producer_byte_rate=...), or give "
             "the target connection its own client.id")


def is_wait(code: int) -> bool:
    """Whether a broker error is a refusal the target lifts by itself (waited for, no alarm)."""
    return code in _WAITS


def describe(code: int) -> tuple[str, str, str]:
    """The cause's name, what it means, and what to change, for a broker error ``code``."""
    name = ERRORS[code].name if code in ERRORS else f"UNKNOWN_CODE_{code}"
    meaning, change = _WORDS.get(code) or _WAITS.get(code) or (
        f"the target refused the partition's batches with {name}",
        "see the target brokers' log")
    return name, meaning, change


def is_refusal(code: int) -> bool:
    """Whether a broker error is the target's verdict on a partition's records, which retrying
    the same bytes will not change until the target is (not: retriable errors, which the producer
    retries itself, nor a batch too large, which the sink splits)."""
    info = ERRORS.get(code)
    if code in codes.TOO_LARGE:
        return False
    return code in _WORDS or info is None or not info.retriable


@dataclass
class Refusal:
    """A partition the target refuses: since when, how often, and when it is tried again."""

    partition: TopicPartition
    target: TopicPartition
    code: int
    since: float  # wall clock, seconds
    refusals: int = 1
    retry_at: float = 0.0  # monotonic clock

    @property
    def waiting(self) -> bool:
        """A refusal the target lifts by itself (WAITING_IS_NOT_FAILING)."""
        return is_wait(self.code)

    def status(self, now: float) -> dict[str, object]:
        """The refusal as a task's status shows it (JSON)."""
        name, meaning, change = describe(self.code)
        return {"partition": str(self.partition), "target_partition": str(self.target), "cause": name,
                "meaning": meaning, "change": change, "since": round(self.since, 3),
                "refusals": self.refusals, "retry_in_seconds": round(max(0.0, self.retry_at - now), 3)}


class PartitionRefusals:
    """The partitions of one task that rest after a failed put, and those the target refuses
    (see the module docstring: ONE_PARTITION_WAITS, RESUMES_BY_ITSELF)."""

    def __init__(self, retry_backoff: float, max_backoff: float = REFUSAL_BACKOFF_MAX) -> None:
        self.retry_backoff = retry_backoff
        self.max_backoff = max(max_backoff, retry_backoff)
        #: a refused partition's rests: the retry back-off doubling with each refusal in a row
        self.backoff = Backoff(retry_backoff, self.max_backoff)
        #: source partition -> when it may be fetched again (monotonic): every resting partition
        self._resting: dict[TopicPartition, float] = {}
        #: source partition -> the refusal it rests for (a subset of ``_resting``'s, or a partition
        #: whose rest is over and whose retry has not been answered yet)
        self.refused: dict[TopicPartition, Refusal] = {}

    def __bool__(self) -> bool:
        return bool(self._resting)

    def failed(self, tp: TopicPartition, target: TopicPartition, code: int | None, now: float,
               wall: float) -> Refusal | None:
        """A put of ``tp`` failed with broker error ``code`` (None: not a broker's answer). The
        partition rests; returns its refusal when ``code`` is one (:func:`is_refusal`)."""
        if code is None or not (is_refusal(code) or is_wait(code)):  # a refusal's rest is not shortened
            self._resting[tp] = max(self._resting.get(tp, 0.0), now + self.retry_backoff)
            return None
        refusal = self.refused.get(tp)
        if refusal is None or refusal.code != code:
            refusal = self.refused[tp] = Refusal(tp, target, code, wall)
        else:
            refusal.refusals += 1
        backoff = self.backoff.delay(refusal.refusals - 1)
        refusal.retry_at = self._resting[tp] = now + backoff
        return refusal

    def taken(self, tp: TopicPartition) -> Refusal | None:
        """The target acknowledged a batch of ``tp``: the refusal it rested for, if any, is over."""
        return self.refused.pop(tp, None)

    def resting(self, now: float) -> set[TopicPartition]:
        """The partitions not to fetch now (those whose rest is over are let go)."""
        if not self._resting:
            return set()
        for tp in [tp for tp, at in self._resting.items() if at <= now]:
            del self._resting[tp]
        return set(self._resting)

    def next_due(self) -> float | None:
        """When the first resting partition may be fetched again (monotonic), if any rests."""
        return min(self._resting.values(), default=None)

    def status(self, now: float) -> list[dict[str, object]]:
        """The partitions the target refuses, each with its cause, what to change, and its retry."""
        return [r.status(now) for r in self.refused.values() if not r.waiting]

    def waiting(self, now: float) -> list[dict[str, object]]:
        """The partitions waiting for the target (WAITING_IS_NOT_FAILING), as :meth:`status`."""
        return [r.status(now) for r in self.refused.values() if r.waiting]

    def drop(self, tp: TopicPartition) -> None:
        """The partition left the task."""
        self._resting.pop(tp, None)
        self.refused.pop(tp, None)


def rest_failed(
    refusals: PartitionRefusals, causes: Mapping[TopicPartition, tuple[TopicPartition, BaseException]],
    assigned: Container[TopicPartition], now: float, wall: float, task: object,
) -> bool:
    """A put of task ``task`` failed with ``causes``: each failed partition still ``assigned`` rests
    (ONE_PARTITION_WAITS), a refusal of the target named per partition in the log and the status;
    True if every failure was such a refusal."""
    all_refusals = bool(causes)
    for tp, (target, cause) in causes.items():
        if tp not in assigned:
            continue
        code = cause.code if isinstance(cause, BrokerError) else None
        refusal = refusals.failed(tp, target, code, now, wall)
        if refusal is None:
            all_refusals = all_refusals and tp in refusals.refused  # a lane stopped behind one
            continue
        name, meaning, change = describe(refusal.code)
        if refusal.waiting:  # WAITING_IS_NOT_FAILING: named when the wait begins, no alarm
            say = log.info if refusal.refusals == 1 else log.debug
            say("task %s: %s on %s (%s); to change: %s. Trying the partition alone again in %.1fs, "
                "its siblings go on", task, meaning, target, name, change, refusal.retry_at - now,
                extra={THROTTLE_KEY: f"{name} on {target}"})
            continue
        log.warning("task %s: the target refuses %s (%s): %s; to fix: %s. Retrying the partition "
                    "alone in %.1fs (refusal %d), its siblings go on", task, target, name,
                    meaning, change, refusal.retry_at - now, refusal.refusals,
                    extra={THROTTLE_KEY: f"{name} on {target}"})
    return all_refusals


def waiting_status(refusals: PartitionRefusals, now: float, throttles: Any = None) -> list[dict[str, object]]:
    """What a task waits for the target on (WAITING_IS_NOT_FAILING): its partitions with too few
    in-sync replicas, and the brokers throttling it under a quota now or a moment ago (the
    producer's ``Throttles``, on the monotonic clock)."""
    name, meaning, change = THROTTLED
    brokers = [{"broker": t.broker, "cause": name, "meaning": meaning, "change": change,
                "throttle_ms": t.last_ms, "throttled_seconds_total": round(t.total_ms / 1000, 3),
                "retry_in_seconds": round(max(0.0, t.until - time.monotonic()), 3)}
               for t in (throttles.recent() if throttles is not None else ())]
    return [*refusals.waiting(now), *brokers]


def hold_refused(r: RefusedRecord, positions: TaskPositions, losses: LossWatch) -> None:
    """The sink held ``r.source`` right before a record the target refuses even alone: once the
    partition is acknowledged up to it, the alarm, and the record left out (``skip``) or the
    partition held there (``fail``); else (an earlier batch failed) it comes again."""
    if r.source not in positions or positions.acked[r.source] != r.offset:
        return
    if losses.record_too_large(r.source, r.topic, r.offset, r.size, r.limit) is Policy.SKIP:
        positions.skip_record(r.source, r.offset)
    else:
        positions.hold(r.source)
