"""Moves every key of a progress topic into the partition Kafka Connect gives it.

An mm2py before ONE-VALUE-PER-KEY (``protocol/connect_offsets.ProgressFold``) wrote the progress
topic with librdkafka's default partitioner, so a key may sit in another partition than the one
Kafka Connect (MM2) writes it to, and be live in two. mm2py reads such a topic right (the newest
record wins), MM2 does not (it keeps whichever partition it read last). The repair:

1. reads the whole topic: each key's last record in each partition;
2. decides each key's value as ``ProgressFold`` does (``newest_partition``: the newest timestamp,
   a tie to the proper partition) and finds the partitions that hold a key live outside its proper one;
3. writes, to its proper partition, the value of every key that has a record in one of those
   partitions (a tombstone where the newest record was one and an older value would revive);
4. deletes the records of those partitions below where step 1 stopped (DeleteRecords: everything
   the partition held before step 3; a compacted topic refuses it, so ``cleanup.policy`` gets
   ``delete`` beside ``compact``, with retention off, for the call, and then its own settings back).

Tombstones alone would not do: a Connect reader that meets a stray tombstone after the key's proper
value forgets the key, and the task mirrors the partition again from its start. Nothing else may
write the topic meanwhile: stop the flows (mm2py and MM2) that use it first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from mm2py.protocol.connect_offsets import newest_partition
from mm2py.protocol.partitioner import partition_for_key
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.retry import Backoff
from mm2py.stores.topic_tail import TopicTail

log = logging.getLogger(__name__)

#: the topic settings the repair changes for its DeleteRecords call, and their values meanwhile
_FOR_DELETE = {"cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "-1"}


@dataclass(frozen=True)
class Last:
    """A key's last record in one partition."""

    timestamp: int
    value: bytes | None  #: None: a tombstone


@dataclass
class RepairPlan:
    """What a repair writes and deletes."""

    #: (partition, key, value) to produce, value None a tombstone
    writes: list[tuple[int, bytes, bytes | None]] = field(default_factory=list)
    #: partition -> the offset below which its records are deleted (where its reading stopped)
    cuts: dict[int, int] = field(default_factory=dict)
    #: keys that were live outside their proper partition
    strays: list[bytes] = field(default_factory=list)


def plan_repair(
    last: Mapping[bytes, Mapping[int, Last]], ends: Mapping[int, int], partitions: int,
) -> RepairPlan:
    """The repair of a topic of ``partitions`` partitions, given each key's last record per
    partition and each partition's end offset (pure)."""
    plan = RepairPlan()
    winners: dict[bytes, tuple[int, bytes | None]] = {}
    for key, seen in last.items():
        home = partition_for_key(key, partitions)
        best = newest_partition({p: r.timestamp for p, r in seen.items()}, home)
        winners[key] = (home, seen[best].value)
        strays = [p for p, r in seen.items() if p != home and r.value is not None]
        if strays:
            plan.strays.append(key)
            for p in strays:
                plan.cuts[p] = ends[p]
    for key, seen in last.items():
        home, value = winners[key]
        if home in plan.cuts:  # emptied: every live key of it written again
            if value is not None:
                plan.writes.append((home, key, value))
        elif any(p in plan.cuts for p in seen):  # its proper partition stays: make it hold the winner
            here = seen.get(home)
            if (here.value if here is not None else None) != value:
                plan.writes.append((home, key, value))
    return plan


def read_last(
    admin: ClusterAdmin, topic: str, timeout: float,
) -> tuple[dict[bytes, dict[int, Last]], dict[int, int]]:
    """Each key's last record per partition of ``topic``, and where the reading of each stopped (its
    end: everything below was read)."""
    last: dict[bytes, dict[int, Last]] = {}

    def keep(partition: int, timestamp: int, key: bytes | None, value: bytes | None) -> None:
        if key is not None:  # a compacted topic holds none
            last.setdefault(bytes(key), {})[partition] = Last(timestamp, value)

    tail = TopicTail(admin.client_config(), topic, placed=keep, name="progress-repair")
    try:
        if not tail.catch_up(timeout):
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"no topic {topic}"))
        return last, tail.read_to
    finally:
        tail.close()


@dataclass
class RepairReport:
    topic: str
    partitions: int
    keys: int  #: keys read
    strays: int  #: keys that were live outside their proper partition
    written: int  #: records written to proper partitions
    emptied: list[int]  #: partitions whose earlier records were deleted


def repair(admin: ClusterAdmin, topic: str, *, dry_run: bool = False, timeout: float = 60.0) -> RepairReport:
    """Repair ``topic`` on ``admin``'s cluster (see the module's docstring); ``dry_run`` only reads."""
    last, ends = read_last(admin, topic, timeout)
    plan = plan_repair(last, ends, len(ends))
    report = RepairReport(topic, len(ends), len(last), len(plan.strays), len(plan.writes), sorted(plan.cuts))
    if dry_run or not plan.cuts:
        return report
    log.info("%s: %d keys outside their partition; writing %d records, then emptying partitions %s "
             "below where they were read", topic, len(plan.strays), len(plan.writes), report.emptied)
    _produce(admin, topic, plan.writes, timeout)
    client = AdminClient(admin.client_config())
    restore = _own_settings(client, topic, timeout)
    _alter(client, topic, {k: (AlterConfigOpType.SET, v) for k, v in _FOR_DELETE.items()}, timeout)
    try:
        _delete_below(client, topic, plan.cuts, timeout)
    finally:
        _alter(client, topic, restore, timeout)
    return report


def _delete_below(client: AdminClient, topic: str, cuts: Mapping[int, int], timeout: float) -> None:
    """DeleteRecords below ``cuts``. A broker takes a topic's new ``cleanup.policy`` when it replays
    the metadata log, after the controller has answered the change: until then it refuses the
    deletion of a compacted topic's records as POLICY_VIOLATION, and the partitions it refused are
    asked again (0.1 s doubling to 1 s, within ``timeout``)."""
    todo = dict(cuts)
    backoff = Backoff(0.1, 1.0, timeout=timeout, since=time.monotonic())
    while True:
        futures = client.delete_records([CKTopicPartition(topic, p, o) for p, o in todo.items()],
                                        request_timeout=timeout)
        refused: dict[int, int] = {}
        for tp, fut in futures.items():
            try:
                fut.result(timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.POLICY_VIOLATION or backoff.expired(time.monotonic()):
                    raise
                refused[tp.partition] = todo[tp.partition]
        if not refused:
            return
        log.debug("%s: the new cleanup.policy is not in effect yet on every broker; asking again", topic)
        todo = refused
        time.sleep(backoff.next_delay())


def _produce(
    admin: ClusterAdmin, topic: str, writes: list[tuple[int, bytes, bytes | None]], timeout: float,
) -> None:
    producer = Producer(admin.client_config({"acks": "all", "linger.ms": 20, "enable.idempotence": True}))
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for partition, key, value in writes:
        producer.produce(topic, value, key, partition=partition, on_delivery=on_delivery)
        producer.poll(0)
    left = producer.flush(timeout)
    if left or errors:
        raise RuntimeError(f"writing the repaired positions to {topic} failed: {errors[:3] or left}; "
                           "nothing was deleted")


def _own_settings(client: AdminClient, topic: str, timeout: float) -> dict[str, tuple[Any, str]]:
    """How to put back the settings the repair changes: their value where set on the topic, else
    their removal."""
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = client.describe_configs([res], request_timeout=timeout)[res].result(timeout)
    out: dict[str, tuple[Any, str]] = {}
    for name in _FOR_DELETE:
        entry = entries.get(name)
        if entry is not None and entry.source == 1 and entry.value is not None:  # DYNAMIC_TOPIC_CONFIG
            out[name] = (AlterConfigOpType.SET, entry.value)
        else:
            out[name] = (AlterConfigOpType.DELETE, "")
    return out


def _alter(client: AdminClient, topic: str, ops: Mapping[str, tuple[Any, str]], timeout: float) -> None:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, (op, value) in ops.items()
    ])
    for fut in client.incremental_alter_configs([res], request_timeout=timeout).values():
        fut.result(timeout)
