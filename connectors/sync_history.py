"""Keeps a flow's sync history as small as the source's retention allows: tombstones for the points
no offset still on the source needs (``engine/sync_history.py``: ``SyncHistory.obsolete``); and,
with the same log starts in hand, names records the *target* deleted while the source still holds
them (``engine/target_retention.py``: the ``target.retention`` alarm, with the remote topic's
setting that caused it).

One job of the flow runner (``mm2py.offset.sync.history.prune.interval.seconds``): it follows the
history topic (a ``TopicTail``: read once from its start, then what was appended), asks the source
and the target for the log start of each partition the history names (one request per leader
for every 500 partitions, each side), and writes a
tombstone for each obsolete point (partition 0, as the syncs); compaction then drops them. Several
flows of a pair share the topic: each prunes only the partitions of the topics its source still
has, and a point is obsolete by the source's log alone, so two pruners agree.
"""

from __future__ import annotations

import logging
import threading

from confluent_kafka import Consumer, KafkaException, Producer

from mm2py.config.models import FlowConfig
from mm2py.config.security import Side
from mm2py.engine.sync_history import SyncHistory
from mm2py.engine.target_retention import RETENTION_SETTINGS, RetentionLoss, deleted_on_target
from mm2py.engine.target_retention import retention_cause as _cause
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.mm2_records import HistorySync
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin, librdkafka_config
from mm2py.stores.topic_tail import TopicTail, log_starts_of

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
        self._target = Consumer(librdkafka_config(flow, "target", "consumer", {
            "group.id": "mm2py-sync-history", "enable.auto.commit": False}))
        self._target_admin = ClusterAdmin.for_cluster(flow, "target", timeout=timeout)
        self._policy = flow.replication_policy()
        self.tombstones = 0  #: written so far
        #: source partition -> the target.retention alarm standing for it (its loss and cause)
        self.retention_losses: dict[TopicPartition, tuple[RetentionLoss, str]] = {}
        self.retention_alarms = 0  #: target.retention alarms raised so far (a new or a grown loss)
        self._turn = threading.Lock()  # a prune under way when the flow stops ends before close

    def _on_record(self, key: bytes | None, value: bytes | None) -> None:
        try:
            self.history.add(HistorySync.from_record(key, value))
        except ProtocolError as exc:
            log.warning("%s: ignoring a malformed sync history record: %s", self.flow.name, exc)

    def log_starts(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The source's log start of each partition of a topic it still has."""
        return _log_starts(self._admin, self._source, partitions, self.timeout)

    def prune(self) -> int:
        """Reads what the history gained, writes the tombstones it needs now; returns how many."""
        with self._turn:
            return self._prune()

    def _prune(self) -> int:
        if not self._tail.catch_up(self.timeout):
            return 0  # no history yet
        starts = self.log_starts(self.history.partitions())
        self._check_target(starts)
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

    def _check_target(self, starts: dict[TopicPartition, int]) -> None:
        """The target.retention alarm for each partition whose remote partition starts past the
        place of the source's first record there; logged when new or grown, with its cause."""
        name = self._policy.format_remote_topic
        remote = {tp: TopicPartition(name(self.flow.source, tp.topic), tp.partition) for tp in starts}
        try:
            target_starts = _log_starts(self._target_admin, self._target, list(remote.values()), self.timeout)
        except KafkaException as exc:
            log.debug("%s: the target's log starts could not be read: %s", self.flow.name, exc)
            return
        losses = {}
        for tp, source_start in starts.items():
            target_start = target_starts.get(remote[tp])
            if target_start is not None:
                loss = deleted_on_target(tp, remote[tp], self.history.syncs(tp), source_start, target_start)
                if loss is not None:
                    losses[tp] = loss
        before = {tp: loss.target_start for tp, (loss, _cause) in self.retention_losses.items()}
        new = [loss for tp, loss in losses.items() if loss.target_start > before.get(tp, -1)]
        causes = self._causes({loss.remote.topic: loss.partition.topic for loss in new}) if new else {}
        standing = {tp: self.retention_losses[tp] for tp in losses if tp in self.retention_losses}
        for loss in new:
            cause = causes[loss.remote.topic]
            standing[loss.partition] = (loss, cause)
            self.retention_alarms += 1
            log.warning("%s: target.retention: %s starts at offset %d, but the source still holds %s from "
                        "offset %d, which is at %d there: %d offsets the source holds are gone from the "
                        "target, and a consumer failed over would miss them. Cause: %s", self.flow.name,
                        loss.remote, loss.target_start, loss.partition, loss.source_start,
                        loss.expected_start, loss.offsets, cause)
        self.retention_losses = standing

    def _causes(self, source_of: dict[str, str]) -> dict[str, str]:
        """Each remote topic's cause in words, from its and its source topic's applied settings."""
        try:
            theirs = self._admin.applied_configs(set(source_of.values()), RETENTION_SETTINGS)
            mine = self._target_admin.applied_configs(source_of, RETENTION_SETTINGS)
        except KafkaException:
            theirs, mine = {}, {}
        return {remote: _cause(remote, theirs.get(source), mine.get(remote))
                for remote, source in source_of.items()}

    def retention_status(self) -> list[dict[str, object]]:
        """The standing target.retention alarms, for the flow's status."""
        return [loss.as_dict(cause) for _tp, (loss, cause) in sorted(self.retention_losses.items())]

    def close(self) -> None:
        with self._turn:
            self._close()

    def _close(self) -> None:
        self._tail.close()
        self._source.close()
        self._target.close()
        self._producer.flush(self.timeout)


def _log_starts(admin: ClusterAdmin, consumer: Consumer, partitions: list[TopicPartition],
                timeout: float) -> dict[TopicPartition, int]:
    """The log start of each of ``partitions`` whose topic the cluster still has."""
    existing = admin.list_topics()
    asked = [(tp.topic, tp.partition) for tp in partitions
             if (info := existing.get(tp.topic)) is not None and tp.partition < info.partitions]
    if not asked:
        return {}
    return {TopicPartition(t, p): low for (t, p), low in log_starts_of(consumer, asked, timeout).items()}
