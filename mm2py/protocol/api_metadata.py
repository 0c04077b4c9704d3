"""Metadata (api key 3, v4..v13) and ListOffsets (api key 2, v1..v10) codecs."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from mm2py.protocol.framing import is_flexible
from mm2py.protocol.wire import ZERO_UUID, Reader, Writer, protocol_guard

METADATA = 3
LIST_OFFSETS = 2

# --------------------------------------------------------------------------------- Metadata


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class MetadataPartition:
    error_code: int
    partition: int
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class MetadataTopic:
    error_code: int
    name: str | None
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: tuple[MetadataPartition, ...]


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    throttle_time_ms: int
    brokers: dict[int, BrokerMetadata]
    cluster_id: str | None
    controller_id: int
    topics: tuple[MetadataTopic, ...]
    error_code: int = 0


def encode_metadata_request(
    version: int,
    topics: Sequence[str] | None,
    allow_auto_topic_creation: bool = False,
) -> bytes:
    """``topics=None`` asks for all topics."""
    flexible = is_flexible(METADATA, version)
    w = Writer()
    if topics is None:
        w.array_len(None, flexible)
    else:
        w.array_len(len(topics), flexible)
        for name in topics:
            if version >= 10:
                w.uuid(None)
            w.string(name, flexible)
            w.empty_tags(flexible)
    w.boolean(allow_auto_topic_creation)
    if version >= 8:
        if version <= 10:
            w.boolean(False)  # include_cluster_authorized_operations
        w.boolean(False)  # include_topic_authorized_operations
    w.empty_tags(flexible)
    return w.getvalue()


@protocol_guard
def decode_metadata_response(body: memoryview | bytes, version: int) -> MetadataResponse:
    flexible = is_flexible(METADATA, version)
    r = Reader(body)
    throttle = r.int32()
    brokers: dict[int, BrokerMetadata] = {}
    for _ in range(r.array_len(flexible, 10)):
        node_id = r.int32()
        host = r.string(flexible)
        port = r.int32()
        rack = r.nullable_string(flexible)
        r.skip_tagged_fields(flexible)
        brokers[node_id] = BrokerMetadata(node_id, host, port, rack)
    cluster_id = r.nullable_string(flexible)
    controller_id = r.int32()
    topics: list[MetadataTopic] = []
    for _ in range(r.array_len(flexible, 4)):
        t_err = r.int16()
        name = r.nullable_string(flexible) if version >= 12 else r.string(flexible)
        topic_id = r.uuid() if version >= 10 else None
        if topic_id == ZERO_UUID:
            topic_id = None
        internal = r.boolean()
        parts: list[MetadataPartition] = []
        for _ in range(r.array_len(flexible, 10)):
            p_err = r.int16()
            index = r.int32()
            leader = r.int32()
            epoch = r.int32() if version >= 7 else -1
            replicas = tuple(r.int32_array(flexible))
            isr = tuple(r.int32_array(flexible))
            offline = tuple(r.int32_array(flexible)) if version >= 5 else ()
            r.skip_tagged_fields(flexible)
            parts.append(MetadataPartition(p_err, index, leader, epoch, replicas, isr, offline))
        if version >= 8:
            r.int32()  # topic_authorized_operations
        r.skip_tagged_fields(flexible)
        topics.append(MetadataTopic(t_err, name, topic_id, internal, tuple(parts)))
    if 8 <= version <= 10:
        r.int32()  # cluster_authorized_operations
    error_code = r.int16() if version >= 13 else 0
    r.skip_tagged_fields(flexible)
    return MetadataResponse(throttle, brokers, cluster_id, controller_id, tuple(topics), error_code)


# ------------------------------------------------------------------------------ ListOffsets

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionResponse:
    topic: str
    partition: int
    error_code: int
    timestamp: int
    offset: int
    leader_epoch: int = -1


def encode_list_offsets_request(
    version: int,
    topics: Sequence[tuple[str, Sequence[tuple[int, int]]]],
    isolation_level: int = 0,
    timeout_ms: int = 30_000,
    current_leader_epoch: int = -1,
) -> bytes:
    """``topics``: [(topic, [(partition, timestamp), ...]), ...]; -1 latest, -2 earliest."""
    flexible = is_flexible(LIST_OFFSETS, version)
    w = Writer()
    w.int32(-1)  # replica_id: consumer
    if version >= 2:
        w.int8(isolation_level)
    w.array_len(len(topics), flexible)
    for name, parts in topics:
        w.string(name, flexible)
        w.array_len(len(parts), flexible)
        for partition, timestamp in parts:
            w.int32(partition)
            if version >= 4:
                w.int32(current_leader_epoch)
            w.int64(timestamp)
            w.empty_tags(flexible)
        w.empty_tags(flexible)
    if version >= 10:
        w.int32(timeout_ms)
    w.empty_tags(flexible)
    return w.getvalue()


@protocol_guard
def decode_list_offsets_response(
    body: memoryview | bytes, version: int
) -> list[ListOffsetsPartitionResponse]:
    flexible = is_flexible(LIST_OFFSETS, version)
    r = Reader(body)
    if version >= 2:
        r.int32()  # throttle
    out: list[ListOffsetsPartitionResponse] = []
    for _ in range(r.array_len(flexible, 2)):
        name = r.string(flexible)
        for _ in range(r.array_len(flexible, 22)):
            partition = r.int32()
            err = r.int16()
            ts = r.int64()
            off = r.int64()
            epoch = r.int32() if version >= 4 else -1
            r.skip_tagged_fields(flexible)
            out.append(ListOffsetsPartitionResponse(name, partition, err, ts, off, epoch))
        r.skip_tagged_fields(flexible)
    r.skip_tagged_fields(flexible)
    return out
