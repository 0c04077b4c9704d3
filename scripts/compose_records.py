"""Records for scripts/compose-check.sh, run inside a container of the mm2py image on the compose
network (confluent-kafka is installed there; the host needs nothing but Docker).

    create  BOOTSTRAP TOPIC PARTITIONS        create a topic (replication factor 1)
    produce BOOTSTRAP TOPIC FIRST [COUNT]     records FIRST, FIRST+1, ... (COUNT of them, or until
                                              SIGTERM), ~RATE a second (env RATE, default 200)
    growing BOOTSTRAP TOPIC [N]               wait until TOPIC's end offsets grew by N (100)
    verify  SOURCE TOPIC TARGET TARGET_TOPIC  wait until TARGET_TOPIC holds exactly TOPIC's records
    (waits give up after env TIMEOUT seconds, default 300)

Record n has key ``n`` and value ``record-n`` and goes to partition n % partitions; the producer is
idempotent, so the source holds each record once. ``verify`` reads the source topic to its end,
then the target (read_committed) until every partition holds the same records in the same order;
a record on the target twice, or one that is not on the source, fails at once.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def fail(message: str) -> None:
    print(f"FAILED: {message}", flush=True)
    sys.exit(1)


def partitions(bootstrap: str, topic: str, timeout: float = 60.0) -> int:
    """The topic's partition count, once its metadata shows it with leaders."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        leaders = [] if meta is None or meta.error is not None else [
            p.leader for p in meta.partitions.values()]
        if leaders and min(leaders) >= 0:
            return len(leaders)
        if time.monotonic() > deadline:
            fail(f"topic {topic} not on {bootstrap} after {timeout:.0f}s")
        time.sleep(1)


def create(bootstrap: str, topic: str, count: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, int(count), 1)])[topic].result(60)
    print(f"created {topic} with {partitions(bootstrap, topic)} partitions on {bootstrap}", flush=True)


def produce(bootstrap: str, topic: str, first: str, count: str = "0") -> None:
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop.append(signum))
    start, limit = int(first), int(count) or None
    rate = float(os.environ.get("RATE", "200"))
    spread = partitions(bootstrap, topic)
    # log_level 3: errors only (not the retries librdkafka makes by itself while a fresh broker
    # loads its coordinators); every record's delivery is checked below
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "log_level": 3})
    errors: list[str] = []
    acked = [0]

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[0] += 1

    n, began = start, time.monotonic()
    while not stop and (limit is None or n < start + limit):
        producer.produce(topic, key=str(n).encode(), value=f"record-{n}".encode(),
                         partition=n % spread, on_delivery=delivered)
        n += 1
        producer.poll(0)
        ahead = (n - start) / rate - (time.monotonic() - began)
        if ahead > 0:
            time.sleep(ahead)
    producer.flush(60)
    if len(producer):
        errors.append(f"{len(producer)} records still unsent after 60 s")
    print(f"produced records {start}..{n - 1} to {topic}: {acked[0]} acknowledged", flush=True)
    if errors or acked[0] != n - start:
        fail(f"{len(errors)} delivery errors, e.g. {errors[:3]}")


def read(consumer: Consumer, want: dict[int, list[tuple[bytes, bytes]]], at_end: set[int],
         seconds: float) -> bool:
    """Poll for up to ``seconds`` into ``want``; True once every partition is at its end (the
    partitions there are kept in ``at_end`` from call to call)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            if len(at_end) == len(want):
                return True
            continue
        error, partition = msg.error(), msg.partition() or 0
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(error)
            at_end.add(partition)
            continue
        at_end.discard(partition)
        want[partition].append((msg.key() or b"", msg.value() or b""))
    return False


def reader(bootstrap: str, topic: str, count: int) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compose-check",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(count)])
    return consumer


def growing(bootstrap: str, topic: str, more: str = "100") -> None:
    """Wait until the topic's partitions together grew by ``more`` offsets: records are arriving."""
    timeout = float(os.environ.get("TIMEOUT", "300"))
    count = partitions(bootstrap, topic, timeout)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compose-check"})

    def end() -> int:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(count))

    began, first = time.monotonic(), end()
    while (now := end()) < first + int(more):
        if time.monotonic() - began > timeout:
            fail(f"{topic} on {bootstrap} grew by {now - first} offsets in {timeout:.0f}s, not {more}")
        time.sleep(1)
    consumer.close()
    print(f"{topic} on {bootstrap} is growing: {now - first} offsets in "
          f"{time.monotonic() - began:.0f}s", flush=True)


def verify(source: str, topic: str, target: str, target_topic: str) -> None:
    timeout = float(os.environ.get("TIMEOUT", "300"))
    count = partitions(source, topic)
    expected: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(count)}
    consumer, at_end = reader(source, topic, count), set[int]()
    while not read(consumer, expected, at_end, 30):
        pass
    consumer.close()
    positions = {record: (p, i) for p, records in expected.items() for i, record in enumerate(records)}
    total = sum(map(len, expected.values()))
    if len(positions) != total:
        fail(f"{topic} on {source} holds a record twice: the producer's, not the mirror's fault")
    if partitions(target, target_topic, timeout) != count:
        fail(f"{target_topic} on {target} does not have {count} partitions")
    got: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(count)}
    consumer, at_end = reader(target, target_topic, count), set[int]()
    deadline = time.monotonic() + timeout
    matched_at = None
    while True:
        read(consumer, got, at_end, 2)
        for p, records in got.items():
            for i, record in enumerate(records):
                if i < len(expected[p]) and record == expected[p][i]:
                    continue
                where = positions.get(record)
                what = "a record that is not on the source" if where is None else (
                    f"record {record[0].decode()} twice" if where == (p, records.index(record))
                    else f"record {record[0].decode()} out of place (source partition {where[0]} "
                         f"position {where[1]})")
                fail(f"{target_topic} partition {p} position {i}: {what}")
        if all(len(got[p]) == len(expected[p]) for p in range(count)):
            # all there: wait a little more for a late duplicate
            matched_at = matched_at or time.monotonic()
            if time.monotonic() - matched_at > 5:
                break
        elif time.monotonic() > deadline:
            missing = {p: len(expected[p]) - len(got[p]) for p in range(count)}
            fail(f"after {timeout:.0f}s {target_topic} still misses records, per partition: {missing}")
    consumer.close()
    counts = ", ".join(f"p{p}={len(records)}" for p, records in got.items())
    print(f"{target_topic} on {target} holds the {total} records of {topic} once each, in order "
          f"({counts})", flush=True)


if __name__ == "__main__":
    commands: dict[str, Callable[..., None]] = {
        "create": create, "produce": produce, "growing": growing, "verify": verify}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        fail(f"usage: {__doc__}")
    commands[sys.argv[1]](*sys.argv[2:])
