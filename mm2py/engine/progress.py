"""Where each source partition's mirroring stands, kept in a compacted topic on the target.

Records use Kafka Connect's offset-storage layout as MM2's MirrorSourceTask writes it: key
``["MirrorSourceConnector",{"cluster":"<source>","partition":N,"topic":"<topic>"}]`` and value
``{"offset":O}`` where ``O`` is the last source offset delivered to the target. A restarted task
resumes at ``O + 1``. Topic: ``mm2-offsets.<source>.internal``.

A position is only written after the target acknowledged every batch below it (at-least-once).
mm2py adds ``"mm2py.target.offset"``: the target partition's end after that last batch. MM2 reads
only ``offset``, so the records stay MM2-compatible; mm2py uses the extra field on restart to
recognise batches that reached the target after the last commit (see ``connectors/resume.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import NamedTuple

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.engine.admin import ClusterAdmin
from mm2py.protocol.types import TopicPartition

log = logging.getLogger(__name__)

CONNECTOR_NAME = "MirrorSourceConnector"
TARGET_FIELD = "mm2py.target.offset"


class Position(NamedTuple):
    """Where a source partition stands: next source offset, and the target end it maps to."""

    source: int
    target: int | None = None


def progress_topic(source_alias: str) -> str:
    return f"mm2-offsets.{source_alias}.internal"


def encode_key(source_alias: str, tp: TopicPartition) -> bytes:
    part = {"cluster": source_alias, "partition": tp.partition, "topic": tp.topic}
    return json.dumps([CONNECTOR_NAME, part], separators=(",", ":"), sort_keys=True).encode()


def encode_value(last_offset: int, target_next: int | None = None) -> bytes:
    value: dict[str, int] = {"offset": last_offset}
    if target_next is not None:
        value[TARGET_FIELD] = target_next
    return json.dumps(value, separators=(",", ":")).encode()


def decode(key: bytes | None, value: bytes | None) -> tuple[str, TopicPartition, Position | None] | None:
    """(cluster, partition, position or None for a tombstone); None for foreign records."""
    if key is None:
        return None
    try:
        name, part = json.loads(key)
        if name != CONNECTOR_NAME:
            return None
        tp = TopicPartition(str(part["topic"]), int(part["partition"]))
        cluster = str(part["cluster"])
        if value is None:
            return cluster, tp, None
        doc = json.loads(value)
        target = doc.get(TARGET_FIELD)
        return cluster, tp, Position(int(doc["offset"]) + 1, None if target is None else int(target))
    except (ValueError, KeyError, TypeError):
        log.warning("ignoring a malformed progress record with key %r", key[:200])
        return None


class ProgressStore:
    """Loads and commits source positions (next offset to fetch) for one source cluster."""

    def __init__(
        self,
        admin: ClusterAdmin,
        source_alias: str,
        *,
        replication_factor: int = -1,
        producer_overrides: Mapping[str, object] | None = None,
    ) -> None:
        self.admin = admin
        self.source_alias = source_alias
        self.topic = progress_topic(source_alias)
        self.replication_factor = replication_factor
        self._producer_conf = admin.client_config(producer_overrides)  # the admin's security settings
        self._producer_conf.update({"acks": "all", "linger.ms": 0})
        self._producer: Producer | None = None
        self._committed: dict[TopicPartition, Position] = {}

    def ensure_topic(self) -> None:
        self.admin.ensure_compacted_topic(self.topic, self.replication_factor)

    def load(self, timeout: float = 30.0) -> dict[TopicPartition, Position]:
        """Where each partition this cluster's tasks ever mirrored stands."""
        conf = self.admin.client_config({
            "group.id": f"mm2py-progress-reader-{self.source_alias}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        })
        consumer = Consumer(conf)
        positions: dict[TopicPartition, Position] = {}
        try:
            md = consumer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
            if md is None or md.error is not None:
                return {}
            parts = list(md.partitions)
            ends = {}
            for p in parts:
                _, high = consumer.get_watermark_offsets(
                    CKTopicPartition(self.topic, p), timeout=timeout
                )
                ends[p] = high
            pending = {p for p in parts if ends[p] > 0}
            consumer.assign([CKTopicPartition(self.topic, p, 0) for p in pending])
            while pending:
                msg = consumer.poll(timeout)
                if msg is None:
                    raise TimeoutError(f"reading {self.topic} timed out")
                err = msg.error()
                if err is not None:
                    if err.code() == -191:  # partition EOF
                        pending.discard(msg.partition())
                        continue
                    raise KafkaException(err)
                decoded = decode(msg.key(), msg.value())
                if decoded is not None and decoded[0] == self.source_alias:
                    _, tp, pos = decoded
                    if pos is None:
                        positions.pop(tp, None)
                    else:
                        positions[tp] = pos
                if (msg.offset() or 0) + 1 >= ends[msg.partition()]:
                    pending.discard(msg.partition())
        finally:
            consumer.close()
        self._committed.update(positions)
        return positions

    def commit(self, positions: Mapping[TopicPartition, Position], timeout: float = 30.0) -> None:
        """Persist positions that changed since the last commit; blocks until acknowledged."""
        changed = {tp: o for tp, o in positions.items() if self._committed.get(tp) != o}
        if not changed:
            return
        if self._producer is None:
            self._producer = Producer(self._producer_conf)
        errors: list[str] = []

        def on_delivery(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))

        for tp, pos in changed.items():
            self._producer.produce(
                self.topic, encode_value(pos.source - 1, pos.target), encode_key(self.source_alias, tp),
                on_delivery=on_delivery,
            )
        left = self._producer.flush(timeout)
        if left or errors:
            raise RuntimeError(f"committing progress to {self.topic} failed: {errors[:3] or left}")
        self._committed.update(changed)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None
