"""A flow's offset syncs and committed positions read once, translating any offset both ways.

What it is for: everything that moves a consumer between a flow's clusters by hand — ``mm2py
offsets translate|apply --direction back`` (failback of consumer groups), ``mm2py offsets
translate-offset`` and ``GET /flows/{name}/translate`` (one offset), ``mm2py offsets rewrite`` (a
JSON ``{topic: {partition: offset}}`` map, a Spark Structured Streaming checkpoint). The rule is
``mm2py/engine/translation.py``'s, exact both ways; this module reads what it needs:

* the positions every flow of the pair committed on the target (``mm2-offsets.<source>.internal``)
  — read **first**: a task flushes its offset syncs before it commits a position, so every sync
  below a position read is then on the offset-syncs topic;
* the pair's offset syncs: its sync history (``mm2py-offset-sync-history.<target>.internal``: every
  run sync still within the source's retention, ``engine/sync_history.py``) and what
  ``mm2-offset-syncs.<target>.internal`` still holds (both on the source, or on the target with
  ``offset-syncs.topic.location = target``).

Topic names: a source topic ``orders`` is ``east.orders`` on the target (the flow's replication
policy). An offset is named by its topic on the cluster it is from (``orders`` forward,
``east.orders`` back); the other cluster's name is accepted as well.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException

from mm2py.config.models import FlowConfig
from mm2py.config.security import Side
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.engine.sync_history import SyncHistory, merged
from mm2py.engine.translation import (
    Direction,
    NotMirroredError,
    PartitionMap,
    PastLogEndError,
    TranslationError,
)
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.mm2_records import HistorySync, OffsetSync
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin, StoreError, librdkafka_config
from mm2py.stores.positions import PositionStore
from mm2py.stores.topic_tail import TopicTail, watermarks

__all__ = ["FlowTranslator", "Translated", "read_offset_syncs", "read_positions", "source_topic_of"]

#: Spark's and Kafka's "latest" and "earliest" stand-ins in an offsets map: kept as they are
SENTINELS = frozenset({-1, -2})


def read_offset_syncs(flow: FlowConfig, timeout: float = 30.0) -> OffsetSyncStore:
    """The pair's offset syncs to translate with: each partition's sync history (every run sync
    still kept) and the offset-syncs topic's syncs (``engine/sync_history.merged``). Read after
    the positions they serve (raises
    ``StoreError`` when a topic cannot be read, ``ClusterUnreachableError`` when the cluster does
    not answer)."""
    older, history = OffsetSyncStore(), SyncHistory()

    def on_sync(key: bytes | None, value: bytes | None) -> None:
        with contextlib.suppress(ProtocolError):
            older.add(OffsetSync.from_record(key, value))

    def on_history(key: bytes | None, value: bytes | None) -> None:
        with contextlib.suppress(ProtocolError):
            history.add(HistorySync.from_record(key, value))

    side: Side = "source" if flow.offset_syncs_cluster == flow.source else "target"
    ClusterAdmin.for_cluster(flow, side, timeout=timeout).list_topics()  # named if unreachable
    client = librdkafka_config(flow, side, "consumer")
    for topic, handler in ((flow.offset_sync_history_topic(), on_history),
                           (flow.offset_syncs_topic(), on_sync)):
        tail = TopicTail(client, topic, handler, name="translator")
        try:
            tail.catch_up(timeout)  # a topic that does not exist holds nothing
        except (KafkaException, TimeoutError) as exc:
            raise StoreError(f"reading {topic} on '{flow.offset_syncs_cluster}' failed: {exc}") from None
        finally:
            tail.close()
    syncs = OffsetSyncStore(max_per_partition=1 << 62)
    for tp in sorted(set(older.partitions()) | set(history.partitions())):
        for u, d in merged(history.syncs(tp), older.syncs(tp)):
            syncs.add(OffsetSync(tp, u, d))
    return syncs


def read_positions(flow: FlowConfig, timeout: float = 30.0) -> dict[TopicPartition, Position]:
    """The positions every flow of the pair committed on the target, by source partition (raises
    ``StoreError`` when the progress topic cannot be read, ``ClusterUnreachableError`` when the
    target does not answer)."""
    target = ClusterAdmin.for_cluster(flow, "target", timeout=timeout)
    target.list_topics()  # an unreachable target is named (ClusterUnreachableError)
    store = PositionStore(target, flow.source, connector=None)  # every flow of the pair
    try:
        return store.load(timeout)
    except (KafkaException, TimeoutError, RuntimeError) as exc:
        raise StoreError(f"reading {store.topic} on '{flow.target}' failed: {exc}") from None


def log_end(flow: FlowConfig, timeout: float, side: Side, tp: TopicPartition) -> int:
    """``tp``'s high watermark on the flow's ``side`` now (a consumer's lag is measured to it)."""
    consumer = Consumer(librdkafka_config(flow, side, "consumer", {"group.id": "mm2py-translator"}))
    try:
        return watermarks(consumer, tp.topic, tp.partition, timeout)[1]
    except KafkaException as exc:
        cluster = flow.source if side == "source" else flow.target
        raise StoreError(f"reading the log end of {tp} on '{cluster}' failed: {exc}") from None
    finally:
        consumer.close()


def source_topic_of(flow: FlowConfig, target_topic: str) -> str:
    """The source topic a target topic of ``flow`` mirrors (``east.orders`` -> ``orders``; the same
    name under ``IdentityReplicationPolicy`` or for a name the policy does not trace to the source)."""
    policy = flow.replication_policy()
    upstream = policy.upstream_topic(target_topic)
    if policy.topic_source(target_topic) == flow.source and upstream is not None:
        return upstream
    return target_topic


@dataclass(frozen=True)
class Translated:
    """One offset translated: where it is on the source and on the target."""

    direction: Direction
    source_topic: str
    target_topic: str
    partition: int
    source_offset: int
    target_offset: int


#: a partition's log end on the flow's source or target cluster now
LogEnd = Callable[[Side, TopicPartition], int]


@dataclass
class FlowTranslator:
    """The flow's syncs and positions as read at one moment (:meth:`read`); translating is pure but
    for ``log_end``: each answer is checked against the log end of its partition on the cluster it
    is for (asked once a partition; None: not checked), so a position is never past it."""

    flow: FlowConfig
    syncs: OffsetSyncStore
    positions: Mapping[TopicPartition, Position]
    log_end: LogEnd | None = None
    _maps: dict[TopicPartition, PartitionMap] = field(default_factory=dict)
    _ends: dict[tuple[Side, TopicPartition], int] = field(default_factory=dict)

    @classmethod
    def read(cls, flow: FlowConfig, timeout: float = 30.0) -> FlowTranslator:
        """Reads the pair's committed positions, then its offset syncs (raises ``StoreError`` when a
        topic cannot be read, ``ClusterUnreachableError`` when a cluster does not answer)."""
        positions = read_positions(flow, timeout)
        return cls(flow, read_offset_syncs(flow, timeout), positions,
                   functools.partial(log_end, flow, timeout))

    def target_topic_of(self, source_topic: str) -> str:
        return self.flow.replication_policy().format_remote_topic(self.flow.source, source_topic)

    def source_topic(self, topic: str, partition: int, direction: Direction) -> str:
        """The source topic an offset named ``topic`` (on the cluster ``direction`` reads from, or
        else on the other) belongs to; ``NotMirroredError`` when the flow mirrored no such partition."""
        mirrored = source_topic_of(self.flow, topic)
        candidates = [topic, mirrored] if direction is Direction.FORWARD else [mirrored, topic]
        for name in candidates:
            if TopicPartition(name, partition) in self.positions:
                return name
        raise NotMirroredError(
            f"flow {self.flow.name} has no committed position for {topic}-{partition} "
            f"(it is not a partition the flow mirrors, or not one it has mirrored yet)",
            TopicPartition(topic, partition))

    def partition_map(self, tp: TopicPartition) -> PartitionMap:
        """The exact map of source partition ``tp``."""
        pm = self._maps.get(tp)
        if pm is None:
            pm = self._maps[tp] = PartitionMap.of(tp, self.syncs.syncs(tp), self.positions.get(tp))
        return pm

    def translate(self, topic: str, partition: int, offset: int, direction: Direction) -> Translated:
        """One offset of ``topic``'s ``partition`` translated (``TranslationError`` when it cannot be,
        exactly)."""
        if offset < 0:
            raise TranslationError(f"offset {offset} of {topic}-{partition} is negative",
                                   TopicPartition(topic, partition), offset)
        source = self.source_topic(topic, partition, direction)
        result = self.partition_map(TopicPartition(source, partition)).translate(offset, direction)
        forward = direction is Direction.FORWARD
        there = TopicPartition(self.target_topic_of(source) if forward else source, partition)
        self._check_end("target" if forward else "source", there, result)
        return Translated(direction, source, self.target_topic_of(source), partition,
                          offset if forward else result, result if forward else offset)

    def _check_end(self, side: Side, tp: TopicPartition, offset: int) -> None:
        if self.log_end is None:
            return
        end = self._ends.get((side, tp))
        if end is None:
            end = self._ends[side, tp] = self.log_end(side, tp)
        if offset > end:
            cluster = self.flow.target if side == "target" else self.flow.source
            raise PastLogEndError(
                f"{tp} on '{cluster}' ends at {end}, before the translated position {offset}: the "
                "partition was truncated or created again since the flow committed", tp, offset)

    def rewrite(self, offsets: Mapping[str, Mapping[int, int]], direction: Direction
                ) -> dict[str, dict[int, int]]:
        """A ``{topic: {partition: offset}}`` map of one cluster as the same map of the other:
        topics renamed, offsets translated (Spark's -1/-2, latest/earliest, kept as they are). Every
        partition is tried; one ``TranslationError`` names all that cannot be translated."""
        out: dict[str, dict[int, int]] = {}
        failed: list[str] = []
        for topic, partitions in offsets.items():
            for partition, offset in partitions.items():
                try:
                    if offset in SENTINELS:
                        source = self.source_topic(topic, partition, direction)
                        name = self.target_topic_of(source) if direction is Direction.FORWARD else source
                        out.setdefault(name, {})[partition] = offset
                        continue
                    t = self.translate(topic, partition, offset, direction)
                except TranslationError as exc:
                    failed.append(str(exc))
                    continue
                name, moved = ((t.target_topic, t.target_offset) if direction is Direction.FORWARD
                               else (t.source_topic, t.source_offset))
                out.setdefault(name, {})[partition] = moved
        if failed:
            more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
            raise TranslationError(f"{len(failed)} offsets cannot be translated: "
                                   + "; ".join(failed[:3]) + more)
        return {topic: dict(sorted(parts.items())) for topic, parts in sorted(out.items())}
