"""Keeps a flow's sync history as small as the source's retention allows: tombstones for the points
no offset still on the source needs (``engine/sync_history.py``: ``SyncHistory.obsolete``).

One job of the flow runner (``mm2py.offset.sync.history.prune.interval.seconds``): it follows the
history topic (a ``TopicTail``: read once from its start, then what was appended), asks the source
for the log start of each partition the history names (two requests per leader), and writes a
tombstone for each obsolete point (partition 0, as the syncs); compaction then drops them. Several
flows of a pair share the topic: each prunes only the partitions of the topics its source still
has, and a point is obsolete by the source's log alone, so two pruners agree.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict

from confluent_kafka import Consumer, KafkaException, Producer

from mm2py.config.models import FlowConfig
from mm2py.config.security import Side
from mm2py.engine.sync_history import SyncHistory
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.mm2_records import HistorySync
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin, librdkafka_config
from mm2py.stores.topic_tail import TopicTail, bounds

__all__ = ["SyncHistoryPruner"]

log = logging.getLogger(__name__)


class SyncHistoryPruner:
    """Prunes one flow's sync history (:meth:`prune`, blocking: run it in a thread)."""

    def __init__(self, flow: FlowConfig, timeout: float = 30.0) -> None:
        self.flow = flow
        self.timeout = timeout
        self.history = SyncHistory()
        side: Side = "source" if flow.offset_syncs_cluster == flow.source else "target"
        self.topic = flow.offset_sync_history_topic()
        self._tail = TopicTail(librdkafka_config(flow, side, "consumer"), self.topic, self._on_record,
                               name=f"sync-history-{flow.source}-{flow.target}")
        self._producer = Producer(librdkafka_config(flow, side, "producer", {"acks": "all", "linger.ms": 5}))
        self._source = Consumer(librdkafka_config(flow, "source", "consumer", {
            "group.id": "mm2py-sync-history", "enable.auto.commit": False}))
        self._admin = ClusterAdmin.for_cluster(flow, "source", timeout=timeout)
        self.tombstones = 0  #: written so far
        self._turn = threading.Lock()  # a prune under way when the flow stops ends before close

    def _on_record(self, key: bytes | None, value: bytes | None) -> None:
        try:
            self.history.add(HistorySync.from_record(key, value))
        except ProtocolError as exc:
            log.warning("%s: ignoring a malformed sync history record: %s", self.flow.name, exc)

    def log_starts(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The source's log start of each partition of a topic it still has."""
        existing = self._admin.list_topics()
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            info = existing.get(tp.topic)
            if info is not None and tp.partition < info.partitions:
                by_topic[tp.topic].append(tp.partition)
        starts: dict[TopicPartition, int] = {}
        for topic, parts in by_topic.items():
            for p, (low, _end) in bounds(self._source, topic, parts, self.timeout).items():
                starts[TopicPartition(topic, p)] = low
        return starts

    def prune(self) -> int:
        """Reads what the history gained, writes the tombstones it needs now; returns how many."""
        with self._turn:
            return self._prune()

    def _prune(self) -> int:
        if not self._tail.catch_up(self.timeout):
            return 0  # no history yet
        starts = self.log_starts(self.history.partitions())
        written = 0
        for tp in self.history.partitions():
            for upstream in self.history.obsolete(tp, starts.get(tp)):
                record = HistorySync(tp, upstream, None)
                self._producer.produce(self.topic, record.value_bytes(), record.key_bytes(), partition=0)
                self.history.add(record)
                written += 1
        if written:
            left = self._producer.flush(self.timeout)
            if left:
                raise KafkaException(f"{left} tombstones for {self.topic} not acknowledged")
            log.info("%s: %d offset syncs of the sync history are before the source's log start: "
                     "tombstoned", self.flow.name, written)
        self.tombstones += written
        return written

    def close(self) -> None:
        with self._turn:
            self._close()

    def _close(self) -> None:
        self._tail.close()
        self._source.close()
        self._producer.flush(self.timeout)
