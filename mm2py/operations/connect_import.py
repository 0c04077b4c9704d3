"""A Kafka Connect cluster's MirrorSourceConnector positions, read into a flow's own (issue 49).

Strimzi (and any MM2 run as connectors on a Connect cluster) keeps the source connector's progress
in the Connect cluster's offsets topic on the target, keyed by the connector's name
(``<source>-><target>.MirrorSourceConnector`` under Strimzi) in the layout mm2py's own progress
topic uses (:mod:`mm2py.protocol.connect_offsets`). An import reads that topic with the store that
reads mm2py's own (:class:`PositionStore`, given the topic and the connector, strict), which folds it
as Connect does (the last record of a key wins, a tombstone forgets) for one connector and the
flow's source cluster, and applies the result through :func:`reset_offsets`, so the flow resumes at
the next record the connector had not delivered.

Invariant ALL-OR-NOTHING: nothing is written unless the whole topic was read and every record
of the connector decoded; any other connector's records (the checkpoint connector's
``{"group","topic","partition"}`` keys, say) are skipped by name, never decoded.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from mm2py.config.errors import ConfigError
from mm2py.config.loader import read_document
from mm2py.config.models import FlowConfig
from mm2py.config.strimzi import connect_offsets_of, is_resource
from mm2py.operations.flow_offsets import OffsetResetError, PartitionOffset, Reset, reset_offsets
from mm2py.protocol.connect_offsets import Position, progress_topic
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.stores.positions import MalformedPositionError, PositionStore

__all__ = ["ConnectImportError", "ImportSource", "import_offsets", "import_source", "read_connect_positions"]


class ConnectImportError(OffsetResetError):
    """A Connect offsets topic that cannot be imported (missing, malformed, nothing of the connector):
    a reset that cannot be done as asked."""


@dataclass(frozen=True)
class ImportSource:
    """Where an import reads: the Connect offsets topic on the flow's target, and the connector."""

    topic: str
    connector: str


def import_source(path: str | Path, flow: FlowConfig, topic: str | None,
                  connector: str | None) -> ImportSource:
    """The topic and connector to import from: those given, else a Strimzi resource's
    (:func:`connect_offsets_of`); a file of another kind must name both. Refuses mm2py's own
    progress topic and connector name (there is nothing to import: the flow already reads them)."""
    doc = read_document(path)
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


def read_connect_positions(admin: ClusterAdmin, source: ImportSource, source_alias: str,
                           timeout: float) -> dict[TopicPartition, Position]:
    """The connector's positions for ``source_alias``, the whole of ``source.topic`` read (with the
    admin's client settings); raises :class:`ConnectImportError` for a missing topic, a malformed
    record of the connector (named by its partition and offset), a topic that holds no record of
    the connector, or only tombstones."""
    store = PositionStore(admin, source_alias, connector=source.connector, topic=source.topic, strict=True)
    try:
        positions = store.load(timeout)
    except MalformedPositionError as exc:
        raise ConnectImportError(f"{exc}; nothing imported") from None
    except TimeoutError:
        raise ConnectImportError(f"reading {source.topic} timed out after {timeout:.0f}s; "
                                 "nothing imported") from None
    if not store.found:
        raise ConnectImportError(f"no topic {source.topic} on the target cluster (the Connect "
                                 "cluster's offset.storage.topic; --from-topic names another)")
    if not store.records_folded:
        raise ConnectImportError(
            f"{source.topic} holds no record of connector {source.connector!r} for cluster "
            f"'{source_alias}' (is it the Connect cluster's offset.storage.topic, and the "
            "connector's name?)")
    if not positions:
        raise ConnectImportError(f"{source.topic}: every position of {source.connector!r} was "
                                 "forgotten (tombstones): nothing to import")
    return positions


async def import_offsets(flow: FlowConfig, source: ImportSource, *,
                         execute: bool = False) -> list[PartitionOffset]:
    """Read the connector's positions and write them as the flow's (``execute=False``: only read,
    resolve and check them); the rows :func:`reset_offsets` returns."""
    admin = ClusterAdmin.for_cluster(flow, "target")
    positions = await asyncio.to_thread(read_connect_positions, admin, source, flow.source,
                                        flow.admin_timeout_ms / 1000)
    changes: dict[TopicPartition, Reset | None] = {tp: pos.source for tp, pos in positions.items()}
    return await reset_offsets(flow, changes, execute=execute)
