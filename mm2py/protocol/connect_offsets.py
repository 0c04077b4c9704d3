"""Kafka Connect's source-offset records, as MM2's MirrorSourceTask writes them (pure codec).

A source partition's progress is one record in ``mm2-offsets.<source>.internal`` (compacted, on the
target): key ``["MirrorSourceConnector",{"cluster":"<source>","partition":N,"topic":"<topic>"}]``
(the first element is the connector's name, as Kafka Connect keys source offsets: MM2's
``MirrorSourceConnector`` for a pair's unnamed flow, a named flow's own name otherwise, so several
flows of one pair keep separate positions in the same topic)
and value ``{"offset":O}``, ``O`` the last source offset delivered to the target; a restarted task
resumes at ``O + 1``. A null value (tombstone) forgets the partition.

mm2py adds ``"mm2py.target.offset"`` to the value: the target partition's end after that last
batch. MM2 reads only ``offset``, so the records stay MM2-compatible, and positions MM2 wrote are
read here with no target offset.

It also adds ``"mm2py.topic.id"``: the source topic's id (Kafka's text form, as
``kafka-topics --describe`` shows it) of the incarnation the position was read from, so a topic
deleted and created again while no task mirrored it is told from the one mirrored. Positions written
without it (MM2's, an older mm2py's) are read with no topic id, and checked by offsets alone.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Mapping
from typing import NamedTuple

from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.partitioner import partition_for_key
from mm2py.protocol.types import TopicPartition

__all__ = [
    "CONNECTOR_NAME",
    "TARGET_FIELD",
    "TOPIC_ID_FIELD",
    "MalformedOffsetRecordError",
    "Position",
    "ProgressFold",
    "decode",
    "encode_key",
    "encode_value",
    "fold",
    "newest_partition",
    "progress_topic",
    "topic_id_text",
]

log = logging.getLogger(__name__)

CONNECTOR_NAME = "MirrorSourceConnector"
TARGET_FIELD = "mm2py.target.offset"
TOPIC_ID_FIELD = "mm2py.topic.id"


class MalformedOffsetRecordError(ProtocolError):
    """A record in the progress topic whose key or value is not Connect's offset layout."""


class Position(NamedTuple):
    """Where a source partition stands: next source offset, the target end it maps to, and the id
    of the source topic's incarnation it is a position in (:func:`topic_id_text`; None: unknown)."""

    source: int
    target: int | None = None
    topic_id: str | None = None


def topic_id_text(topic_id: uuid.UUID) -> str:
    """A topic id as Kafka writes it (``Uuid.toString``: URL-safe base64 of its 16 bytes, unpadded)."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def progress_topic(source_alias: str) -> str:
    return f"mm2-offsets.{source_alias}.internal"


def encode_key(source_alias: str, tp: TopicPartition, connector: str = CONNECTOR_NAME) -> bytes:
    part = {"cluster": source_alias, "partition": tp.partition, "topic": tp.topic}
    return json.dumps([connector, part], separators=(",", ":"), sort_keys=True).encode()


def encode_value(last_offset: int, target_next: int | None = None, topic_id: str | None = None) -> bytes:
    value: dict[str, int | str] = {"offset": last_offset}
    if target_next is not None:
        value[TARGET_FIELD] = target_next
    if topic_id is not None:
        value[TOPIC_ID_FIELD] = topic_id
    return json.dumps(value, separators=(",", ":")).encode()


def decode(key: bytes | None, value: bytes | None,
           connector: str | None = CONNECTOR_NAME) -> tuple[str, TopicPartition, Position | None] | None:
    """(cluster, partition, position or None for a tombstone); None for another connector's record
    (``connector=None``: every connector's).

    Raises :class:`MalformedOffsetRecordError` for bytes that are not Connect's layout."""
    if key is None:
        raise MalformedOffsetRecordError("a progress record without a key")
    try:
        name, part = json.loads(key)
        if not isinstance(name, str) or (connector is not None and name != connector):
            return None
        tp = TopicPartition(str(part["topic"]), int(part["partition"]))
        cluster = str(part["cluster"])
        if value is None:
            return cluster, tp, None
        doc = json.loads(value)
        target, topic_id = doc.get(TARGET_FIELD), doc.get(TOPIC_ID_FIELD)
        return cluster, tp, Position(int(doc["offset"]) + 1, None if target is None else int(target),
                                     None if topic_id is None else str(topic_id))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        shown = bytes(key[:200])
        raise MalformedOffsetRecordError(f"not a Connect offset record (key {shown!r}): {exc}") from None


def fold(positions: dict[TopicPartition, Position], source_alias: str, key: bytes | None,
         value: bytes | None, connector: str | None = CONNECTOR_NAME) -> None:
    """Apply one progress record to ``positions`` (the partitions of ``source_alias`` that
    ``connector`` mirrors; None: any connector's): a position replaces the partition's, a
    tombstone removes it, other clusters' and connectors' records are ignored. Raises
    :class:`MalformedOffsetRecordError` and leaves ``positions`` as it was."""
    decoded = decode(key, value, connector)
    if decoded is None or decoded[0] != source_alias:
        return
    _, tp, pos = decoded
    if pos is None:
        positions.pop(tp, None)
    else:
        positions[tp] = pos


def newest_partition(stamps: Mapping[int, int], home: int) -> int:
    """ONE-VALUE-PER-KEY: of the partitions holding a key (partition -> the timestamp of its last
    record of the key), the one whose record counts: the newest, a tie going to the key's proper
    partition ``home``, then to the highest partition (so the same whatever order they were read in)."""
    return max(stamps, key=lambda p: (stamps[p], p == home, p))


class _Latest(NamedTuple):
    """A key's newest record in one partition of the progress topic."""

    timestamp: int  #: the record's timestamp (ms), as its writer stamped it
    proper: bool  #: the partition is the one Java's partitioner gives the key
    position: Position | None  #: None: a tombstone


class ProgressFold:
    """Positions folded from a progress topic of several partitions, record by record, where a key
    may be live in more than one partition.

    Kafka Connect (and so MM2, and mm2py since it partitions as Java does) writes a key to one
    partition, ``partition_for_key``; an older mm2py wrote some keys elsewhere, so a topic may hold
    one key in two partitions. A plain fold then keeps whichever it read last, which depends on how
    the reader interleaved the partitions. This fold decides the same way whatever the order
    (invariant ONE-VALUE-PER-KEY): within a partition the later record wins, as compaction keeps it;
    across partitions the record with the newest timestamp wins (the last write of the position, by
    its writer's clock), a tie going to the key's proper partition. A key found live in two
    partitions is logged once (``mm2py flow-offsets repair`` moves it where it belongs).

    ``partitions`` is the topic's partition count (to tell a key's proper partition); ``connector``
    None folds every connector's records. ``records`` counts the records folded (the connector's, of
    the source cluster, tombstones too): none tells a topic that never held the connector's positions
    from one whose positions were all forgotten.

    A follower of the topic that reads a run of records at a time (the checkpoint connector, a
    minute of commits at once) hands them to :meth:`offer` and folds them with :meth:`settle`: only
    the last record read of a key in a partition is decoded (LAST_IN_PARTITION_WINS).
    """

    def __init__(
        self, source_alias: str, connector: str | None = CONNECTOR_NAME, partitions: int = 1,
    ) -> None:
        self.source_alias = source_alias
        self.connector = connector
        self._partitions = partitions
        #: each key's newest record per partition it was seen in (usually one)
        self._latest: dict[TopicPartition, dict[int, _Latest]] = {}
        self._resolved: dict[TopicPartition, Position] = {}
        self._warned: set[TopicPartition] = set()
        self._home: dict[bytes, int] = {}  #: each key's proper partition (murmur2 once per key)
        self.records = 0  #: records of the connector for the source cluster folded so far
        #: what :meth:`offer` took since the last :meth:`settle`: (partition, key) -> (timestamp,
        #: value) of the key's last record read there, in the order of those last records
        self._offered: dict[tuple[int, bytes | None], tuple[int, bytes | None]] = {}

    @property
    def partitions(self) -> int:
        """The topic's partition count: a key's proper partition is told by it (records already
        folded keep what they were told)."""
        return self._partitions

    @partitions.setter
    def partitions(self, count: int) -> None:
        if count != self._partitions:
            self._partitions = count
            self._home.clear()

    def add(self, partition: int, timestamp: int, key: bytes | None, value: bytes | None) -> None:
        """Fold one record read from ``partition`` of the topic. Raises
        :class:`MalformedOffsetRecordError` and leaves the fold as it was."""
        decoded = decode(key, value, self.connector)
        if decoded is None or decoded[0] != self.source_alias:
            return
        assert key is not None  # decode refused a record without one
        _, tp, pos = decoded
        home = self._home.get(key)
        if home is None:
            home = self._home[key] = partition_for_key(key, self.partitions)
        proper = home == partition
        seen = self._latest.setdefault(tp, {})
        seen[partition] = _Latest(timestamp, proper, pos)
        if len(seen) == 1:
            winner: Position | None = pos
        else:
            winner = seen[newest_partition({p: r.timestamp for p, r in seen.items()}, home)].position
            live = sum(r.position is not None for r in seen.values())
            if live > 1 and tp not in self._warned:
                self._warned.add(tp)
                log.warning(
                    "progress of %s (cluster %s) is live in %d partitions of %s's progress topic "
                    "(written by an older mm2py?): the newest record wins; `mm2py flow-offsets "
                    "repair` moves it to its proper partition", tp, self.source_alias, live,
                    self.connector or "every connector")
        if winner is None:
            self._resolved.pop(tp, None)
        else:
            self._resolved[tp] = winner
        self.records += 1

    def offer(self, partition: int, timestamp: int, key: bytes | None, value: bytes | None) -> None:
        """Take one record read from ``partition``, folded at the next :meth:`settle`.

        LAST_IN_PARTITION_WINS: within a partition a key's later record replaces its earlier one, as
        compaction and Kafka Connect's own reader have it, so only the last one read is decoded
        (at 2,000 partitions a minute of commits is ~12,000 records of 2,000 keys). The records
        are folded in the order of each key's last record, so of two spellings of one partition's
        key the one written last still wins. A malformed last record is reported by :meth:`settle`,
        and its key's earlier records read with it are not folded."""
        at = (partition, key)
        self._offered.pop(at, None)  # to the end: folded after the keys last written before it
        self._offered[at] = (timestamp, value)

    def settle(self) -> list[MalformedOffsetRecordError]:
        """Fold what :meth:`offer` took since the last settle; the errors of the malformed records
        (each left out, as :meth:`add` leaves one out)."""
        offered, self._offered = self._offered, {}
        errors: list[MalformedOffsetRecordError] = []
        for (partition, key), (timestamp, value) in offered.items():
            try:
                self.add(partition, timestamp, key, value)
            except MalformedOffsetRecordError as exc:
                errors.append(exc)
        return errors

    def positions(self) -> dict[TopicPartition, Position]:
        """Each partition's resolved position (a copy)."""
        return dict(self._resolved)

    @property
    def resolved(self) -> Mapping[TopicPartition, Position]:
        """Each partition's resolved position (the fold's own map, read-only; follows later adds)."""
        return self._resolved

    def stray(self) -> dict[TopicPartition, list[int]]:
        """Keys live outside their proper partition: the topic partitions that hold them."""
        out: dict[TopicPartition, list[int]] = {}
        for tp, seen in self._latest.items():
            strays = [p for p, r in seen.items() if not r.proper and r.position is not None]
            if strays:
                out[tp] = sorted(strays)
        return out
