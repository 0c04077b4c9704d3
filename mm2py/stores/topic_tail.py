"""Follows a small internal topic incrementally: each call reads what was appended since the last one.

The checkpoint connector keeps its view of the offset-syncs, progress and checkpoints topics up to
date with these: one consumer per topic, assigned (no group, nothing committed), positioned where
the previous catch-up stopped, so a topic is read from the beginning once and never again; paused
between catch-ups, so it sends no fetch requests while nobody reads. A catch-up with little to read
takes a few milliseconds (the live group offset sync of a runtime without its tasks in the process
catches up several times a second): the partitions' bounds in two requests per broker, asked after
the resume (a request wakes librdkafka's broker thread, which otherwise sleeps up to a second before
it fetches the resumed partitions) behind a fetch that waits at most 10 ms at the end of the topic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CKTopicPartition

RecordHandler = Callable[[bytes | None, bytes | None], None]
#: ``(partition, timestamp ms, key, value)``: for a reader that must know where a record was
PlacedHandler = Callable[[int, int, bytes | None, bytes | None], None]


#: what a broker answers for a partition that has no leader yet (a topic just created, a leader
#: moving): ask again
_NO_LEADER_YET = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                            KafkaError.UNKNOWN_TOPIC_OR_PART})
#: ListOffsets' special timestamps: the log start and the end a reader of the client's isolation
#: level reads to (the high watermark for read_uncommitted, the last stable offset for read_committed)
_EARLIEST, _LATEST = -2, -1


def watermarks(consumer: Consumer, topic: str, partition: int, timeout: float) -> tuple[int, int]:
    """(low, high) offsets of one partition, asked again while it has no leader yet (the 25
    partitions of a progress topic created a moment ago elect theirs one by one)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                CKTopicPartition(topic, partition), timeout=max(0.1, deadline - time.monotonic()))
            return int(low), int(high)
        except KafkaException as exc:
            if exc.args[0].code() not in _NO_LEADER_YET or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def bounds(
    consumer: Consumer, topic: str, partitions: list[int], timeout: float
) -> dict[int, tuple[int, int]]:
    """(low, end) offsets of ``partitions`` of ``topic`` (see :func:`bounds_of`)."""
    return {p: b for (_t, p), b in bounds_of(consumer, [(topic, p) for p in partitions], timeout).items()}


#: partitions asked per ``offsets_for_times`` call: librdkafka matches each partition of the answer
#: to the request by a linear search, so one call's CPU grows with the square of its partitions
#: (10,000 partitions: 0.6 CPU s a call, against 0.04 s in calls of 500, on one broker). The sync
#: history's pruner asks for every partition of a flow, both clusters: 2.4 CPU s a prune at 10,000,
#: the machine saturated for seconds after start
BOUNDS_CHUNK = 500


def bounds_of(
    consumer: Consumer, partitions: list[tuple[str, int]], timeout: float
) -> dict[tuple[str, int], tuple[int, int]]:
    """(low, end) offsets of ``partitions`` (topic, partition), of any topics, in two ListOffsets
    requests per leader for every :data:`BOUNDS_CHUNK` partitions instead of a round trip per
    partition or per topic (asked again while a partition has no leader yet). A client fetching
    from a broker sends these behind its fetch there: 25 partitions asked one by one, each behind a
    50 ms long poll, took 1.25 s; the sync history's log starts asked topic by topic were 80
    requests to each broker at 40 topics."""
    deadline = time.monotonic() + timeout
    low = offsets_at(consumer, partitions, _EARLIEST, timeout)
    end = offsets_at(consumer, partitions, _LATEST, max(0.1, deadline - time.monotonic()))
    return {tp: (low[tp], end[tp]) for tp in partitions}


def log_starts_of(
    consumer: Consumer, partitions: list[tuple[str, int]], timeout: float
) -> dict[tuple[str, int], int]:
    """The log start offset of each of ``partitions`` (one ListOffsets request per leader for every
    :data:`BOUNDS_CHUNK` partitions)."""
    return offsets_at(consumer, partitions, _EARLIEST, timeout)


def offsets_at(
    consumer: Consumer, partitions: list[tuple[str, int]], at: int, timeout: float
) -> dict[tuple[str, int], int]:
    """The offset ``at`` (:data:`_EARLIEST`, :data:`_LATEST`) of each of ``partitions``, in calls
    of at most :data:`BOUNDS_CHUNK` partitions, each asked again while a partition has no leader
    yet, all within ``timeout``."""
    deadline = time.monotonic() + timeout
    found: dict[tuple[str, int], int] = {}
    for first in range(0, len(partitions), BOUNDS_CHUNK):
        chunk = partitions[first:first + BOUNDS_CHUNK]
        while True:
            left = max(0.1, deadline - time.monotonic())
            try:
                answer = consumer.offsets_for_times([CKTopicPartition(t, p, at) for t, p in chunk], left)
                err = next((x.error for x in answer if x.error is not None), None)
            except KafkaException as exc:
                err = exc.args[0]
            if err is None:
                found.update(((x.topic, x.partition), x.offset) for x in answer)
                break
            if (err.code() not in _NO_LEADER_YET | {KafkaError._UNKNOWN_PARTITION}
                    or time.monotonic() > deadline):
                raise KafkaException(err)
            time.sleep(0.05)
    return found


class TopicTail:
    """Reads ``topic`` from the start, then only new records, handing each to ``handler(key, value)``
    (or, given ``placed``, to ``placed(partition, timestamp, key, value)``)."""

    def __init__(
        self, client: Mapping[str, Any], topic: str, handler: RecordHandler | None = None, *,
        placed: PlacedHandler | None = None, name: str = "tail",
    ) -> None:
        """``client``: the consumer's connection settings (``librdkafka_config``: servers, TLS/SASL)."""
        if (handler is None) == (placed is None):
            raise TypeError("a TopicTail takes one handler: handler or placed")
        self.topic = topic
        if placed is None:
            assert handler is not None
            plain = handler

            def placed(_partition: int, _timestamp: int, key: bytes | None, value: bytes | None) -> None:
                plain(key, value)
        self.placed = placed
        self._consumer = Consumer({**client, **{
            "group.id": f"mm2py-{name}",  # required by librdkafka; never joined nor committed to
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_uncommitted",
            "auto.offset.reset": "earliest",
            # catching up is a short read to a known end: do not let the fetcher idle at the end
            # (a bounds request sent meanwhile waits behind it)
            "fetch.wait.max.ms": 10,
            "fetch.error.backoff.ms": 50,
        }})
        self._next: dict[int, int] = {}  # partition -> next offset to read
        self.records = 0
        self.partitions = 0  #: the topic's partition count at the last catch-up
        self.caught_up_once = False

    def catch_up(self, timeout: float = 30.0) -> bool:
        """Read everything up to the current end of every partition (blocking).

        False when the topic does not exist (yet); raises on time-out or a read error.
        """
        deadline = time.monotonic() + timeout
        try:
            md = self._consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
        except KafkaException as exc:
            raise TimeoutError(f"reading {self.topic}: {exc}") from None
        if md is None or md.error is not None or not md.partitions:
            return False
        self.partitions = len(md.partitions)
        new = [p for p in md.partitions if p not in self._next]
        if new:
            for p in new:
                self._next[p] = 0
            self._consumer.incremental_assign(
                [CKTopicPartition(self.topic, p, OFFSET_BEGINNING) for p in new]
            )
        parts = [CKTopicPartition(self.topic, p) for p in self._next]
        self._consumer.resume(parts)
        ends = bounds(self._consumer, self.topic, list(self._next), timeout)
        try:
            return self._read_to_end(ends, deadline, timeout)
        finally:
            # between catch-ups nothing is fetched: librdkafka would otherwise keep asking for the
            # idle end of the topic every fetch.wait.max.ms (100 requests a second to each broker)
            self._consumer.pause(parts)

    @property
    def read_to(self) -> dict[int, int]:
        """Where the reading of each partition stopped (after a catch-up: its end then)."""
        return dict(self._next)

    def _read_to_end(self, bounds: Mapping[int, tuple[int, int]], deadline: float, timeout: float) -> bool:
        ends: dict[int, int] = {}
        for p, (low, high) in bounds.items():
            self._next[p] = max(self._next[p], low)
            ends[p] = high
        while any(self._next[p] < ends[p] for p in ends):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"reading {self.topic} to its end timed out after {timeout:.0f}s")
            # poll() returns with the first record there; consume() with a time-out would hold out
            # for a full batch of 1000 until it ran out, so it only takes what was fetched already
            first = self._consumer.poll(min(0.05, left))
            for msg in [] if first is None else [first, *self._consumer.consume(1000, 0)]:
                err = msg.error()
                p = msg.partition() or 0
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        self._next[p] = max(self._next[p], msg.offset() or 0)
                        continue
                    raise KafkaException(err)
                if (msg.offset() or 0) < self._next[p]:
                    continue  # handed over before a pause (a resumed fetch may start below)
                self.placed(p, msg.timestamp()[1], msg.key(), msg.value())
                self.records += 1
                self._next[p] = (msg.offset() or 0) + 1
        self.caught_up_once = True
        return True

    def close(self) -> None:
        self._consumer.close()
