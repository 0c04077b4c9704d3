"""Codecs for MirrorMaker 2's internal records: offset syncs, checkpoints and heartbeats.

The byte layouts follow Kafka's ``Struct`` encoding as used by MM2 (connect/mirror,
connect/mirror-client): fields back to back, big-endian integers, ``STRING`` = int16 byte length
followed by UTF-8 bytes (a negative length is invalid: these fields are not nullable). No framing.

======================  ==========================================  ====================================
record                  key                                         value
======================  ==========================================  ====================================
OffsetSync              topic STRING, partition INT32               upstreamOffset INT64, offset INT64
Checkpoint              group STRING, topic STRING, partition INT32 version INT16 (=0), upstreamOffset
                                                                    INT64, offset INT64, metadata STRING
Heartbeat               sourceClusterAlias STRING,                  version INT16 (=0), timestamp INT64
                        targetClusterAlias STRING
HistorySync (mm2py)     topic STRING, partition INT32,              upstreamOffset INT64, offset INT64
                        upstreamOffset INT64                        (null: a tombstone)
======================  ==========================================  ====================================

``HistorySync`` is mm2py's own record, on its sync history topic (``mm2py-offset-sync-history.<alias>
.internal``): an offset sync keyed by its upstream offset too, so that compaction keeps every one
(``mm2py/engine/sync_history.py``); MM2 neither writes nor reads it.

Decoding is strict: a short buffer raises :class:`TruncatedError`, trailing bytes, negative string
lengths, invalid UTF-8 or a missing key/value raise :class:`MalformedRecordError`, and a value
header version other than 0 raises :class:`UnsupportedError`. (Java MM2 ignores trailing bytes; no
MM2 version writes any, so we treat them as corruption.) Nothing else escapes the decoders.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mm2py.protocol.errors import ProtocolError, TruncatedError, UnsupportedError
from mm2py.protocol.types import TopicPartition

__all__ = [
    "RECORD_VERSION",
    "Checkpoint",
    "Heartbeat",
    "HistorySync",
    "MalformedRecordError",
    "OffsetSync",
]

#: The only value-header version MM2 has ever written for checkpoints and heartbeats.
RECORD_VERSION = 0

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_MAX_STRING_BYTES = 0x7FFF
_INT32_RANGE = (-(2**31), 2**31 - 1)
_INT64_RANGE = (-(2**63), 2**63 - 1)

Buffer = bytes | bytearray | memoryview


class MalformedRecordError(ProtocolError):
    """An MM2 internal record whose bytes do not follow the expected Struct layout."""


# ----------------------------------------------------------------------------- encoding helpers


def _put_string(out: bytearray, value: str, field: str) -> None:
    data = value.encode("utf-8")
    if len(data) > _MAX_STRING_BYTES:
        raise ValueError(f"{field} is {len(data)} UTF-8 bytes; the STRING type allows at most 32767")
    out += _INT16.pack(len(data))
    out += data


def _check_int(value: int, bounds: tuple[int, int], field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} must be an int, got {type(value).__name__}")
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{field}={value} is out of range")


def _check_str(value: str, field: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a str, got {type(value).__name__}")
    if len(value.encode("utf-8")) > _MAX_STRING_BYTES:  # also rejects lone surrogates
        raise ValueError(f"{field} is longer than 32767 UTF-8 bytes")


# ----------------------------------------------------------------------------- decoding helpers


class _Reader:
    """Sequential big-endian reader over a buffer that raises only ProtocolError subclasses."""

    __slots__ = ("_buf", "_pos", "_what")

    def __init__(self, buf: Buffer | None, what: str) -> None:
        if buf is None:
            raise MalformedRecordError(f"{what} is null")
        try:
            self._buf = memoryview(buf).cast("B")
        except TypeError as exc:  # e.g. a multi-dimensional or non-contiguous buffer
            raise MalformedRecordError(f"{what} is not a byte buffer: {exc}") from None
        self._pos = 0
        self._what = what

    def _take(self, size: int, field: str) -> memoryview:
        end = self._pos + size
        if end > len(self._buf):
            raise TruncatedError(
                f"{self._what}: {field} needs {size} bytes at offset {self._pos}, "
                f"only {len(self._buf) - self._pos} left"
            )
        chunk = self._buf[self._pos : end]
        self._pos = end
        return chunk

    def int16(self, field: str) -> int:
        value: int = _INT16.unpack(self._take(2, field))[0]
        return value

    def int32(self, field: str) -> int:
        value: int = _INT32.unpack(self._take(4, field))[0]
        return value

    def int64(self, field: str) -> int:
        value: int = _INT64.unpack(self._take(8, field))[0]
        return value

    def string(self, field: str) -> str:
        length = self.int16(field)
        if length < 0:
            raise MalformedRecordError(f"{self._what}: {field} has negative length {length}")
        raw = self._take(length, field)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRecordError(f"{self._what}: {field} is not valid UTF-8: {exc}") from None

    def version(self) -> None:
        version = self.int16("version")
        if version != RECORD_VERSION:
            raise UnsupportedError(f"{self._what}: unsupported record version {version}")

    def end(self) -> None:
        extra = len(self._buf) - self._pos
        if extra:
            raise MalformedRecordError(f"{self._what}: {extra} unexpected trailing bytes")


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class OffsetSync:
    """Maps an upstream offset of a source partition to the offset it got on the target."""

    topic_partition: TopicPartition
    upstream_offset: int
    downstream_offset: int

    def __post_init__(self) -> None:
        _check_str(self.topic_partition.topic, "topic")
        _check_int(self.topic_partition.partition, _INT32_RANGE, "partition")
        _check_int(self.upstream_offset, _INT64_RANGE, "upstream_offset")
        _check_int(self.downstream_offset, _INT64_RANGE, "downstream_offset")

    def key_bytes(self) -> bytes:
        out = bytearray()
        _put_string(out, self.topic_partition.topic, "topic")
        out += _INT32.pack(self.topic_partition.partition)
        return bytes(out)

    def value_bytes(self) -> bytes:
        return _INT64.pack(self.upstream_offset) + _INT64.pack(self.downstream_offset)

    @classmethod
    def from_record(cls, key: Buffer | None, value: Buffer | None) -> OffsetSync:
        k = _Reader(key, "OffsetSync key")
        topic = k.string("topic")
        partition = k.int32("partition")
        k.end()
        v = _Reader(value, "OffsetSync value")
        upstream = v.int64("upstreamOffset")
        downstream = v.int64("offset")
        v.end()
        return cls(TopicPartition(topic, partition), upstream, downstream)


@dataclass(frozen=True, slots=True)
class HistorySync:
    """One offset sync on mm2py's sync history topic, or its tombstone (``downstream_offset`` None):
    the key names the partition and the upstream offset, so every sync is a key of its own."""

    topic_partition: TopicPartition
    upstream_offset: int
    downstream_offset: int | None

    def __post_init__(self) -> None:
        _check_str(self.topic_partition.topic, "topic")
        _check_int(self.topic_partition.partition, _INT32_RANGE, "partition")
        _check_int(self.upstream_offset, _INT64_RANGE, "upstream_offset")
        if self.downstream_offset is not None:
            _check_int(self.downstream_offset, _INT64_RANGE, "downstream_offset")

    @classmethod
    def of(cls, sync: OffsetSync) -> HistorySync:
        return cls(sync.topic_partition, sync.upstream_offset, sync.downstream_offset)

    @property
    def sync(self) -> OffsetSync | None:
        """The offset sync it keeps; None for a tombstone."""
        if self.downstream_offset is None:
            return None
        return OffsetSync(self.topic_partition, self.upstream_offset, self.downstream_offset)

    def key_bytes(self) -> bytes:
        out = bytearray()
        _put_string(out, self.topic_partition.topic, "topic")
        out += _INT32.pack(self.topic_partition.partition)
        out += _INT64.pack(self.upstream_offset)
        return bytes(out)

    def value_bytes(self) -> bytes | None:
        if self.downstream_offset is None:
            return None
        return _INT64.pack(self.upstream_offset) + _INT64.pack(self.downstream_offset)

    @classmethod
    def from_record(cls, key: Buffer | None, value: Buffer | None) -> HistorySync:
        k = _Reader(key, "HistorySync key")
        topic = k.string("topic")
        partition = k.int32("partition")
        upstream = k.int64("upstreamOffset")
        k.end()
        if value is None:
            return cls(TopicPartition(topic, partition), upstream, None)
        v = _Reader(value, "HistorySync value")
        value_upstream = v.int64("upstreamOffset")
        downstream = v.int64("offset")
        v.end()
        if value_upstream != upstream:
            raise MalformedRecordError(
                f"HistorySync: the key's upstream offset {upstream} differs from the value's "
                f"{value_upstream}")
        return cls(TopicPartition(topic, partition), upstream, downstream)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A consumer group's committed upstream offset translated to the target cluster.

    ``topic_partition`` names the *downstream* (renamed) topic, as MM2 writes it.
    """

    group: str
    topic_partition: TopicPartition
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def __post_init__(self) -> None:
        _check_str(self.group, "group")
        _check_str(self.topic_partition.topic, "topic")
        _check_int(self.topic_partition.partition, _INT32_RANGE, "partition")
        _check_int(self.upstream_offset, _INT64_RANGE, "upstream_offset")
        _check_int(self.downstream_offset, _INT64_RANGE, "downstream_offset")
        _check_str(self.metadata, "metadata")

    def key_bytes(self) -> bytes:
        out = bytearray()
        _put_string(out, self.group, "group")
        _put_string(out, self.topic_partition.topic, "topic")
        out += _INT32.pack(self.topic_partition.partition)
        return bytes(out)

    def value_bytes(self) -> bytes:
        out = bytearray(_INT16.pack(RECORD_VERSION))
        out += _INT64.pack(self.upstream_offset)
        out += _INT64.pack(self.downstream_offset)
        _put_string(out, self.metadata, "metadata")
        return bytes(out)

    @classmethod
    def from_record(cls, key: Buffer | None, value: Buffer | None) -> Checkpoint:
        k = _Reader(key, "Checkpoint key")
        group = k.string("group")
        topic = k.string("topic")
        partition = k.int32("partition")
        k.end()
        v = _Reader(value, "Checkpoint value")
        v.version()
        upstream = v.int64("upstreamOffset")
        downstream = v.int64("offset")
        metadata = v.string("metadata")
        v.end()
        return cls(group, TopicPartition(topic, partition), upstream, downstream, metadata)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Liveness marker emitted into the ``heartbeats`` topic; ``timestamp`` is epoch millis."""

    source_alias: str
    target_alias: str
    timestamp: int

    def __post_init__(self) -> None:
        _check_str(self.source_alias, "source_alias")
        _check_str(self.target_alias, "target_alias")
        _check_int(self.timestamp, _INT64_RANGE, "timestamp")

    def key_bytes(self) -> bytes:
        out = bytearray()
        _put_string(out, self.source_alias, "source_alias")
        _put_string(out, self.target_alias, "target_alias")
        return bytes(out)

    def value_bytes(self) -> bytes:
        return _INT16.pack(RECORD_VERSION) + _INT64.pack(self.timestamp)

    @classmethod
    def from_record(cls, key: Buffer | None, value: Buffer | None) -> Heartbeat:
        k = _Reader(key, "Heartbeat key")
        source = k.string("sourceClusterAlias")
        target = k.string("targetClusterAlias")
        k.end()
        v = _Reader(value, "Heartbeat value")
        v.version()
        timestamp = v.int64("timestamp")
        v.end()
        return cls(source, target, timestamp)
