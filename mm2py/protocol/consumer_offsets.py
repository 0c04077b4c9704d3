"""The records of Kafka's ``__consumer_offsets`` topic that say where a consumer group stands (sans-IO).

The group coordinator keeps its state in ``__consumer_offsets``: every offset commit of a group is a
record there, keyed by group, topic and partition, written before the commit is acknowledged (and,
for a transactional commit, made visible to ``read_committed`` readers when the transaction
commits). mm2py's live group offset sync follows the topic to learn of a source group's commit
within milliseconds (``connectors/live_sync.py``). Only what that needs is decoded here:

* **Key.** An INT16 record type, then the key's fields in the non-flexible encoding (STRING = INT16
  length and UTF-8 bytes). Types 0 and 1 are an offset commit (``group``, ``topic``, ``partition``
  INT32); type 2 is a classic group's metadata (``group``). Newer types (consumer groups of the new
  protocol, share groups, ...) say nothing about committed offsets and are reported as
  :class:`OtherRecord` without being read further.
* **Offset commit value.** An INT16 version, then ``offset`` INT64, ``leaderEpoch`` INT32 (versions
  3 and 4), ``metadata`` STRING, ``commitTimestamp`` INT64, ``expireTimestamp`` INT64 (version 1
  only). Version 4 is flexible: its STRING is a compact string (unsigned varint length + 1) and a
  tagged-field section ends the value (tags are skipped). A missing value (a tombstone) means the
  committed offset was deleted (the group was deleted, the offset expired or was deleted by an
  admin).
* **Group metadata.** Only whether the record is a tombstone matters (the group was deleted); the
  value (members, protocol) is not read.

Decoding is strict, as for MM2's own records (:mod:`mm2py.protocol.mm2_records`): a short buffer
raises :class:`TruncatedError`, trailing bytes, negative lengths or invalid UTF-8 raise
:class:`MalformedConsumerOffsetsError`, a value version this module does not know raises
:class:`UnsupportedError`. Nothing else escapes, so a reader can log a bad record and go on.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mm2py.protocol.errors import ProtocolError, UnsupportedError
from mm2py.protocol.types import TopicPartition
from mm2py.protocol.wire import Buf, Reader, Writer, protocol_guard

__all__ = [
    "CONSUMER_OFFSETS_TOPIC",
    "CommittedOffset",
    "ConsumerOffsetsRecord",
    "GroupRecord",
    "MalformedConsumerOffsetsError",
    "OffsetCommit",
    "OtherRecord",
    "decode_record",
    "encode_group_key",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
]

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"

#: record types (the key's INT16) that this module reads
_OFFSET_COMMIT_TYPES = (0, 1)
_GROUP_METADATA_TYPE = 2
#: OffsetCommitValue versions: 0-3 in the classic encoding, 4 flexible (KIP-915: newer fields are
#: tagged, the version stays)
_MAX_VALUE_VERSION = 4
_FLEXIBLE_FROM = 4
_I16 = struct.Struct(">h")


class MalformedConsumerOffsetsError(ProtocolError):
    """A ``__consumer_offsets`` record whose bytes do not follow the coordinator's layout."""


@dataclass(frozen=True)
class CommittedOffset:
    """An offset commit's value: the next offset the group reads, its metadata string, the
    coordinator's time of the commit (ms since the epoch) and the leader epoch (-1: none)."""

    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True)
class OffsetCommit:
    """``group`` committed ``value`` for ``partition``; ``value`` None: the offset was deleted."""

    group: str
    partition: TopicPartition
    value: CommittedOffset | None


@dataclass(frozen=True)
class GroupRecord:
    """A classic group's metadata; ``deleted`` when it is a tombstone (the group is gone)."""

    group: str
    deleted: bool


@dataclass(frozen=True)
class OtherRecord:
    """A record of another type (a new-protocol consumer group's or share group's state...)."""

    record_type: int


ConsumerOffsetsRecord = OffsetCommit | GroupRecord | OtherRecord


def decode_record(key: Buf | None, value: Buf | None) -> ConsumerOffsetsRecord:
    """One ``__consumer_offsets`` record, from its key and value (None: a tombstone)."""
    if key is None:
        raise MalformedConsumerOffsetsError("a __consumer_offsets record without a key")
    return _decode(key, value)


@protocol_guard
def _decode(key: Buf, value: Buf | None) -> ConsumerOffsetsRecord:
    r = Reader(key)
    record_type = r.int16()
    if record_type < 0:
        raise MalformedConsumerOffsetsError(f"negative record type {record_type}")
    if record_type in _OFFSET_COMMIT_TYPES:
        group, topic, partition = r.string(False), r.string(False), r.int32()
        _end(r, "offset commit key")
        if partition < 0:
            raise MalformedConsumerOffsetsError(f"negative partition {partition} in an offset commit key")
        committed = None if value is None else _offset_commit_value(value)
        return OffsetCommit(group, TopicPartition(topic, partition), committed)
    if record_type == _GROUP_METADATA_TYPE:
        group = r.string(False)
        _end(r, "group metadata key")
        return GroupRecord(group, deleted=value is None)
    return OtherRecord(record_type)


def _offset_commit_value(value: Buf) -> CommittedOffset:
    r = Reader(value)
    version = r.int16()
    if version < 0:
        raise MalformedConsumerOffsetsError(f"negative offset commit value version {version}")
    if version > _MAX_VALUE_VERSION:
        raise UnsupportedError(
            f"offset commit value version {version} (this reader knows 0-{_MAX_VALUE_VERSION})")
    flexible = version >= _FLEXIBLE_FROM
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string(flexible)
    commit_timestamp = r.int64()
    if version == 1:
        r.int64()  # expireTimestamp
    r.skip_tagged_fields(flexible)
    _end(r, f"offset commit value v{version}")
    return CommittedOffset(offset, metadata, commit_timestamp, leader_epoch)


def _end(r: Reader, what: str) -> None:
    if r.remaining:
        raise MalformedConsumerOffsetsError(f"{r.remaining} bytes after the {what}")


# ---------------------------------------------------------------------------- encoding (tests, fakes)


def encode_offset_commit_key(group: str, partition: TopicPartition, record_type: int = 1) -> bytes:
    """The key a coordinator writes for ``group``'s commit of ``partition`` (type 0 or 1)."""
    if record_type not in _OFFSET_COMMIT_TYPES:
        raise ValueError(f"an offset commit key has type 0 or 1, not {record_type}")
    w = Writer()
    w.int16(record_type)
    w.string(group, False)
    w.string(partition.topic, False)
    w.int32(partition.partition)
    return w.getvalue()


def encode_group_key(group: str) -> bytes:
    w = Writer()
    w.int16(_GROUP_METADATA_TYPE)
    w.string(group, False)
    return w.getvalue()


def encode_offset_commit_value(committed: CommittedOffset, version: int = 3,
                               tags: dict[int, bytes] | None = None) -> bytes:
    """An offset commit value of ``version`` (0-4; ``tags``: tagged fields of version 4)."""
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise ValueError(f"offset commit value versions are 0-{_MAX_VALUE_VERSION}, not {version}")
    flexible = version >= _FLEXIBLE_FROM
    w = Writer()
    w.raw(_I16.pack(version))
    w.int64(committed.offset)
    if version >= 3:
        w.int32(committed.leader_epoch)
    w.string(committed.metadata, flexible)
    w.int64(committed.commit_timestamp)
    if version == 1:
        w.int64(-1)
    if flexible:
        w.tagged_fields(tags)
    elif tags:
        raise ValueError("tagged fields need version 4")
    return w.getvalue()
