"""A Kafka Connect cluster's MirrorSourceConnector positions, read into a flow's own (issue 49).

Strimzi (and any MM2 run as connectors on a Connect cluster) keeps the source connector's progress
in the Connect cluster's offsets topic on the target, keyed by the connector's name
(``<source>-><target>.MirrorSourceConnector`` under Strimzi) in the layout mm2py's own progress
topic uses (:mod:`mm2py.protocol.connect_offsets`). An import folds that topic as Connect does (the
last record of a key wins, a tombstone forgets) for one connector and the flow's source cluster,
and applies the result through :func:`reset_offsets`, so the flow resumes at the next record the
connector had not delivered.

Invariant ALL-OR-NOTHING: nothing is written unless the whole topic was read and every record
of the connector decoded; any other connector's records (the checkpoint connector's
``{"group","topic","partition"}`` keys, say) are skipped by name, never decoded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.config.errors import ConfigError
from mm2py.config.models import FlowConfig
from mm2py.config.strimzi import connect_offsets_of, is_resource
from mm2py.operations.flow_offsets import OffsetResetError, PartitionOffset, Reset, reset_offsets
from mm2py.protocol.connect_offsets import (
    MalformedOffsetRecordError,
    Position,
    ProgressFold,
    decode,
    progress_topic,
)
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.stores.topic_tail import bounds

__all__ = ["ConnectFold", "ConnectImportError", "ImportSource", "import_offsets", "import_source",
           "read_connect_positions"]


class ConnectImportError(OffsetResetError):
    """A Connect offsets topic that cannot be imported (missing, malformed, nothing of the connector):
    a reset that cannot be done as asked."""


@dataclass(frozen=True)
class ImportSource:
    """Where an import reads: the Connect offsets topic on the flow's target, and the connector."""

    topic: str
    connector: str


def _document(path: str | Path) -> Any:
    """The parsed YAML/JSON document of ``path`` (None for a ``.properties`` file)."""
    p = Path(path)
    if p.suffix.lower() not in (".yaml", ".yml", ".json"):
        return None
    import yaml

    try:
        data = p.read_bytes()
        return json.loads(data) if p.suffix.lower() == ".json" else yaml.safe_load(data)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {p.name}: {exc}") from None


def import_source(path: str | Path, flow: FlowConfig, topic: str | None,
                  connector: str | None) -> ImportSource:
    """The topic and connector to import from: those given, else a Strimzi resource's
    (:func:`connect_offsets_of`); a file of another kind must name both. Refuses mm2py's own
    progress topic and connector name (there is nothing to import: the flow already reads them)."""
    doc = _document(path)
    if is_resource(doc):
        default_topic, default_connector = connect_offsets_of(doc, flow.source, flow.target)
        topic, connector = topic or default_topic, connector or default_connector
    elif topic is None or connector is None:
        raise ConfigError(
            f"{Path(path).name} is not a Strimzi KafkaMirrorMaker2 resource: give the Connect offsets "
            "topic (--from-topic) and the source connector's name (--connector); MM2 in dedicated mode "
            f"keeps its positions in {progress_topic(flow.source)}, which mm2py already reads",
            "--from-topic")
    if topic == progress_topic(flow.source) and connector == flow.connector_name:
        raise ConfigError(f"{topic} keyed by {connector} is the flow's own progress: nothing to import",
                          "--from-topic")
    return ImportSource(topic, connector)


class ConnectFold:
    """The positions of one connector for one source cluster, folded record by record from a
    Connect offsets topic (ONE-VALUE-PER-KEY, as :class:`ProgressFold`); counts the connector's
    records so that a topic holding none of them is told from one whose positions were forgotten."""

    def __init__(self, topic: str, source_alias: str, connector: str, partitions: int = 1) -> None:
        self.topic = topic
        self.source_alias = source_alias
        self.connector = connector
        self.records = 0  #: records of the connector for the source cluster folded so far
        self._fold = ProgressFold(source_alias, connector, partitions)

    def add(self, partition: int, offset: int, timestamp: int, key: bytes | None,
            value: bytes | None) -> None:
        """Fold one record read at ``partition``/``offset``; raises :class:`ConnectImportError`
        naming them for a record that is not Connect's offset layout."""
        try:
            decoded = decode(key, value, self.connector)
            if decoded is None or decoded[0] != self.source_alias:
                return
            self._fold.add(partition, timestamp, key, value)
        except MalformedOffsetRecordError as exc:
            raise ConnectImportError(
                f"{self.topic} partition {partition} offset {offset}: {exc}; nothing imported") from None
        self.records += 1

    def positions(self) -> dict[TopicPartition, Position]:
        """Each source partition's position; raises :class:`ConnectImportError` when the topic held
        no record of the connector, or only tombstones."""
        if not self.records:
            raise ConnectImportError(
                f"{self.topic} holds no record of connector {self.connector!r} for cluster "
                f"'{self.source_alias}' (is it the Connect cluster's offset.storage.topic, and the "
                "connector's name?)")
        positions = self._fold.positions()
        if not positions:
            raise ConnectImportError(f"{self.topic}: every position of {self.connector!r} was "
                                     "forgotten (tombstones): nothing to import")
        return positions


def read_connect_positions(admin: ClusterAdmin, source: ImportSource, source_alias: str,
                           timeout: float) -> dict[TopicPartition, Position]:
    """Fold the whole of ``source.topic`` (with the admin's client settings) into the connector's
    positions for ``source_alias``; raises :class:`ConnectImportError` for a missing topic."""
    consumer = Consumer(admin.client_config({"group.id": "mm2py-connect-import",
                                             "enable.auto.commit": False,
                                             "enable.partition.eof": True}))
    try:
        md = consumer.list_topics(source.topic, timeout=timeout).topics.get(source.topic)
        if md is None or md.error is not None or not md.partitions:
            raise ConnectImportError(f"no topic {source.topic} on the target cluster (the Connect "
                                     "cluster's offset.storage.topic; --from-topic names another)")
        parts = sorted(md.partitions)
        fold = ConnectFold(source.topic, source_alias, source.connector, len(parts))
        ends = bounds(consumer, source.topic, parts, timeout)
        _read(consumer, source.topic, {p: ends[p] for p in parts if ends[p][1] > ends[p][0]}, fold,
              timeout)
        return fold.positions()
    finally:
        consumer.close()


def _read(consumer: Consumer, topic: str, spans: Mapping[int, tuple[int, int]], fold: ConnectFold,
          timeout: float) -> None:
    """Fold each partition from its log start to the end it had when the read began."""
    pending = set(spans)
    consumer.assign([CKTopicPartition(topic, p, spans[p][0]) for p in pending])
    while pending:
        msg = consumer.poll(timeout)
        if msg is None:
            raise ConnectImportError(f"reading {topic} timed out after {timeout:.0f}s; nothing imported")
        err, part = msg.error(), msg.partition() or 0
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                pending.discard(part)
                continue
            raise KafkaException(err)
        offset = msg.offset() or 0
        if part in pending:
            fold.add(part, offset, msg.timestamp()[1], msg.key(), msg.value())
            if offset + 1 >= spans[part][1]:
                pending.discard(part)


async def import_offsets(flow: FlowConfig, source: ImportSource, *,
                         execute: bool = False) -> list[PartitionOffset]:
    """Read the connector's positions and write them as the flow's (``execute=False``: only read,
    resolve and check them); the rows :func:`reset_offsets` returns."""
    admin = ClusterAdmin.for_cluster(flow, "target")
    positions = await asyncio.to_thread(read_connect_positions, admin, source, flow.source,
                                        flow.admin_timeout_ms / 1000)
    changes: dict[TopicPartition, Reset | None] = {tp: pos.source for tp, pos in positions.items()}
    return await reset_offsets(flow, changes, execute=execute)
