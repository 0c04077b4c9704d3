"""Where each source partition's mirroring stands: :class:`PositionStore`, a compacted topic on the target.

The records are Kafka Connect's source-offset records as MM2 writes them
(:mod:`mm2py.protocol.connect_offsets`). A position is only written after the target acknowledged
every batch below it (at-least-once); its target offset lets a restart recognise batches that
reached the target after the last commit (see ``connectors/resume.py``).

The same layout is a Kafka Connect cluster's offsets topic: a store given ``topic=`` (and the
connector's name) reads a Connect-run MirrorSourceConnector's positions there
(``mm2py flow-offsets import``, :mod:`mm2py.operations.connect_import`), ``strict=True`` so that a
record that is not Connect's layout fails the load instead of being skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.protocol.connect_offsets import (
    CONNECTOR_NAME,
    MalformedOffsetRecordError,
    Position,
    ProgressFold,
    encode_key,
    encode_value,
    progress_topic,
)
from mm2py.protocol.fetch_session import changed_keys
from mm2py.protocol.partitioner import JAVA_PARTITIONER
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.stores.topic_tail import bounds

log = logging.getLogger(__name__)


class MalformedPositionError(MalformedOffsetRecordError):
    """A strict store's load met a record that is not Connect's offset layout: named by its topic,
    partition and offset."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(f"{topic} partition {partition} offset {offset}: {reason}")
        self.topic, self.partition, self.offset, self.reason = topic, partition, offset, reason

    def __reduce__(self) -> tuple[type[MalformedPositionError], tuple[str, int, int, str]]:
        return (type(self), (self.topic, self.partition, self.offset, self.reason))


class ProgressProducer:
    """The librdkafka producer a store's records go out through (made at the first write), and
    :meth:`write`, which returns once every record of the call is acknowledged.

    One per store, or one shared (``shared=True``) by the stores of a flow's tasks in one process
    (``connectors/mirror_task.py``: ``FlowClients``): one client instead of one per task, and the
    commits the tasks start together (``engine/committer.py``: ON_THE_GRID) reach the broker as one
    request per progress partition instead of one per task and partition (librdkafka sends a
    request per partition, confluentinc/librdkafka#1700). A store of its own flushes; a shared
    one's writers each wait for their own records' delivery reports (whichever thread serves
    them), their records gathered for ``linger.ms`` first."""

    def __init__(self, conf: Mapping[str, object], *, shared: bool = False) -> None:
        self.conf = dict(conf)
        self.shared = shared
        self._producer: Producer | None = None
        self._lock = threading.Lock()  # guards the making of the producer

    @classmethod
    def for_admin(cls, admin: ClusterAdmin, overrides: Mapping[str, object] | None = None, *,
                  shared: bool = False) -> ProgressProducer:
        """Progress records' producer on ``admin``'s cluster (with its security settings)."""
        conf = admin.client_config(overrides)
        # the linger gathers the records of the commits a process's tasks start together (a shared
        # producer's writers wait for it; a producer of one store flushes at once)
        conf.update({"acks": "all", "linger.ms": 10,
                     # each key where Kafka Connect (MM2) puts it: ONE-VALUE-PER-KEY
                     "partitioner": JAVA_PARTITIONER})
        return cls(conf, shared=shared)

    def _get(self) -> Producer:
        with self._lock:
            if self._producer is None:
                self._producer = Producer(self.conf)
            return self._producer

    def write(self, topic: str, records: Iterable[tuple[bytes, bytes | None]], timeout: float) -> None:
        """Produce ``records`` (key, value) to ``topic``; raises unless each was acknowledged within
        ``timeout``."""
        producer = self._get()
        delivery = _Delivery()
        produce = producer.produce
        for key, value in records:
            delivery.expect()
            produce(topic, value, key, on_delivery=delivery.reported)
        deadline = time.monotonic() + timeout
        if not self.shared:
            producer.flush(timeout)  # sends now, linger or not; serves every report
        while delivery.pending and (left := deadline - time.monotonic()) > 0:
            producer.poll(min(left, 0.005))  # may serve other writers' reports, and they ours
        if delivery.pending or delivery.errors:
            raise RuntimeError(f"committing progress to {topic} failed: "
                               f"{delivery.errors[:3] or f'{delivery.pending} record(s) unacknowledged'}")

    def close(self, timeout: float = 10.0) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(timeout)


class _Delivery:
    """One :meth:`ProgressProducer.write`'s records not yet reported, and the errors reported."""

    def __init__(self) -> None:
        self.pending = 0
        self.errors: list[str] = []
        #: guards pending and errors: a write's reports may be served by two threads at once
        self._lock = threading.Lock()

    def expect(self) -> None:
        # before its record is produced: its report comes after. Under the lock too: another
        # writer's poll may be serving this write's earlier reports meanwhile, and an unlocked
        # += beside a locked -= can lose either
        with self._lock:
            self.pending += 1

    def reported(self, err: object, _msg: object) -> None:
        with self._lock:
            if err is not None:
                self.errors.append(str(err))
            self.pending -= 1


class PositionStore:
    """Loads and commits one flow's source positions (next offset to fetch) of one source cluster."""

    def __init__(
        self,
        admin: ClusterAdmin,
        source_alias: str,
        *,
        replication_factor: int = -1,
        partitions: int = 1,
        producer_overrides: Mapping[str, object] | None = None,
        connector: str | None = CONNECTOR_NAME,
        topic: str | None = None,
        strict: bool = False,
        producer: ProgressProducer | None = None,
    ) -> None:
        """``producer``: shared with other stores (which close it), else one of its own."""
        self.admin = admin
        self.source_alias = source_alias
        #: whose positions these are (the flow's connector name: its records' key); None reads every
        #: connector's (a pair's flows have disjoint topics) and writes nothing
        self.connector = connector
        #: the topic of the positions: the source cluster's progress topic unless given (a Kafka
        #: Connect cluster's offsets topic, say)
        self.topic = progress_topic(source_alias) if topic is None else topic
        #: a record that is not Connect's offset layout fails the load (:class:`MalformedPositionError`,
        #: naming its partition and offset) instead of being logged and skipped
        self.strict = strict
        self.replication_factor = replication_factor
        self.partitions = partitions  #: the topic's partition count when this store creates it
        self._owns_producer = producer is None
        self._producer = producer or ProgressProducer.for_admin(admin, producer_overrides)
        self._committed: dict[TopicPartition, Position] = {}
        #: each partition's record key (JSON, the same for every commit of it): made once
        self._keys: dict[TopicPartition, bytes] = {}
        #: what :meth:`load` folded from the topic so far, and where it stopped per topic partition
        self._fold = ProgressFold(source_alias, connector)
        self._read_to: dict[int, int] = {}
        self._load_lock = threading.Lock()  # loads run in threads (asyncio.to_thread)
        self.records_read = 0  #: records the last load read from the topic
        self.found = False  #: whether the last load found the topic (with partitions)

    def ensure_topic(self) -> None:
        self.admin.ensure_compacted_topic(self.topic, self.replication_factor, self.partitions)

    def load(self, timeout: float = 30.0) -> dict[TopicPartition, Position]:
        """Where each partition this cluster's tasks ever mirrored stands.

        The first load reads the topic from its start; a later one reads only what was appended
        since (a task whose starts were deferred loads again for each retry: at thousands of
        partitions a full read each time cost seconds). A partition of the topic that now starts
        past, or ends before, where the last load stopped (deleted records, a recreated topic) is
        read again from its start, with everything folded so far dropped.

        A missing topic loads as no position (:attr:`found` tells). A strict store's load raises
        :class:`MalformedPositionError` at the first record that is not Connect's layout, and the next
        load reads the topic from its start again."""
        with self._load_lock:
            conf = self.admin.client_config({
                "group.id": f"mm2py-progress-reader-{self.source_alias}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            })
            consumer = Consumer(conf)
            try:
                md = consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
                self.found = md is not None and md.error is None and bool(md.partitions)
                if md is None or md.error is not None:
                    return {}
                parts = list(md.partitions)
                spans = bounds(consumer, self.topic, parts, timeout)  # two requests per broker
                moved = any(not low <= self._read_to.get(p, 0) <= high for p, (low, high) in spans.items())
                if moved or len(parts) != self._fold.partitions:
                    # read it all again
                    self._fold = ProgressFold(self.source_alias, self.connector, len(parts))
                    self._read_to = {}
                self.records_read = 0
                read_to = {p: max(self._read_to.get(p, 0), spans[p][0]) for p in parts}
                ends = {p: high for p, (_, high) in spans.items()}
                try:
                    self._read(consumer, read_to, ends, timeout)
                except MalformedPositionError:  # strict: nothing of this read counts, the next starts over
                    self._fold = ProgressFold(self.source_alias, self.connector, len(parts))
                    self._read_to = {}
                    raise
            finally:
                consumer.close()
            self._read_to = read_to
            positions = self._fold.positions()
            self._committed.update(positions)
            return positions

    @property
    def records_folded(self) -> int:
        """The records of the connector for the source cluster folded into the positions (tombstones
        too) since the topic was last read from its start: none, and the topic never held any."""
        return self._fold.records

    def _read(
        self, consumer: Consumer, read_to: dict[int, int], ends: Mapping[int, int], timeout: float,
    ) -> None:
        """Fold the records of each partition of the topic from ``read_to`` to its end (``read_to``
        follows)."""
        pending = {p for p in ends if ends[p] > read_to[p]}
        consumer.assign([CKTopicPartition(self.topic, p, read_to[p]) for p in pending])
        while pending:
            msg = consumer.poll(timeout)
            if msg is None:
                raise TimeoutError(f"reading {self.topic} timed out")
            err, part = msg.error(), msg.partition() or 0
            if err is not None:
                if err.code() == -191:  # partition EOF
                    pending.discard(part)
                    read_to[part] = ends[part]
                    continue
                raise KafkaException(err)
            self.records_read += 1
            offset = msg.offset() or 0
            try:
                self._fold.add(part, msg.timestamp()[1], msg.key(), msg.value())
            except MalformedOffsetRecordError as exc:
                if self.strict:
                    raise MalformedPositionError(self.topic, part, offset, str(exc)) from None
                log.warning("%s: ignoring a malformed progress record: %s", self.topic, exc)
            read_to[part] = offset + 1
            if read_to[part] >= ends[part]:
                pending.discard(part)

    def commit(self, positions: Mapping[TopicPartition, Position], timeout: float = 30.0) -> None:
        """Persist positions that changed since the last commit; blocks until acknowledged."""
        moved = changed_keys(positions, self._committed)  # C speed when the partitions are the same
        changed = ({tp: positions[tp] for tp in moved} if moved is not None
                   else {tp: o for tp, o in positions.items() if self._committed.get(tp) != o})
        if not changed:
            return
        self._write({tp: encode_value(pos.source - 1, pos.target, pos.topic_id)
                     for tp, pos in changed.items()}, timeout)
        self._committed.update(changed)

    def forget(self, partitions: Iterable[TopicPartition], timeout: float = 30.0) -> None:
        """Tombstone the partitions' positions: a task takes them up again as never mirrored
        (KIP-875's offset reset); blocks until acknowledged."""
        parts = list(partitions)
        self._write(dict.fromkeys(parts), timeout)
        for tp in parts:
            self._committed.pop(tp, None)

    def _write(self, values: Mapping[TopicPartition, bytes | None], timeout: float) -> None:
        if self.connector is None:
            raise TypeError("a PositionStore of every connector's positions only reads")
        keys, connector = self._keys, self.connector

        def records() -> Iterator[tuple[bytes, bytes | None]]:
            for tp, value in values.items():
                if (key := keys.get(tp)) is None:
                    key = keys[tp] = encode_key(self.source_alias, tp, connector)
                yield key, value

        self._producer.write(self.topic, records(), timeout)

    def close(self) -> None:
        if self._owns_producer:
            self._producer.close(10)
