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
"""

from __future__ import annotations

import json
from typing import NamedTuple

from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.types import TopicPartition

__all__ = [
    "CONNECTOR_NAME",
    "TARGET_FIELD",
    "MalformedOffsetRecordError",
    "Position",
    "decode",
    "encode_key",
    "encode_value",
    "fold",
    "progress_topic",
]

CONNECTOR_NAME = "MirrorSourceConnector"
TARGET_FIELD = "mm2py.target.offset"


class MalformedOffsetRecordError(ProtocolError):
    """A record in the progress topic whose key or value is not Connect's offset layout."""


class Position(NamedTuple):
    """Where a source partition stands: next source offset, and the target end it maps to."""

    source: int
    target: int | None = None


def progress_topic(source_alias: str) -> str:
    return f"mm2-offsets.{source_alias}.internal"


def encode_key(source_alias: str, tp: TopicPartition, connector: str = CONNECTOR_NAME) -> bytes:
    part = {"cluster": source_alias, "partition": tp.partition, "topic": tp.topic}
    return json.dumps([connector, part], separators=(",", ":"), sort_keys=True).encode()


def encode_value(last_offset: int, target_next: int | None = None) -> bytes:
    value: dict[str, int] = {"offset": last_offset}
    if target_next is not None:
        value[TARGET_FIELD] = target_next
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
        target = doc.get(TARGET_FIELD)
        return cluster, tp, Position(int(doc["offset"]) + 1, None if target is None else int(target))
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
