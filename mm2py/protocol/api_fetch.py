"""Fetch (api key 1) codec, versions 4..16.

v7 adds fetch sessions (KIP-227: ``session_id``/``session_epoch`` and the partitions to forget;
the session's state is kept by :mod:`mm2py.protocol.fetch_session`), v12 is flexible, v13+
identify topics by topic id instead of name, v15 replaces replica_id with a tagged replica_state,
v16 adds node endpoints to the response.

The decoder returns each partition's records as a zero-copy ``memoryview`` into the response frame.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from mm2py.protocol.api_metadata import BrokerMetadata
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.framing import is_flexible
from mm2py.protocol.wire import ZERO_UUID, Reader, Writer, protocol_guard

FETCH = 1
FIRST_TOPIC_ID_VERSION = 13

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


@dataclass(frozen=True, slots=True)
class FetchPartitionRequest:
    partition: int
    fetch_offset: int
    partition_max_bytes: int = 1024 * 1024
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    last_fetched_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchTopicRequest:
    topic: str
    partitions: Sequence[FetchPartitionRequest]
    topic_id: uuid.UUID | None = None  # required for v13+


@dataclass(frozen=True, slots=True)
class ForgottenTopic:
    """Partitions a fetch session is to drop (v7+)."""

    topic: str
    partitions: Sequence[int]
    topic_id: uuid.UUID | None = None  # required for v13+


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FetchPartitionResponse:
    topic: str | None  # None for v13+ (identified by topic_id)
    topic_id: uuid.UUID | None
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[AbortedTransaction, ...] | None
    preferred_read_replica: int
    records: memoryview
    current_leader_id: int = -1
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchResponse:
    throttle_time_ms: int
    error_code: int
    session_id: int
    partitions: list[FetchPartitionResponse]
    node_endpoints: dict[int, BrokerMetadata] = field(default_factory=dict)


def encode_fetch_request(
    version: int,
    topics: Sequence[FetchTopicRequest],
    *,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    isolation_level: int = READ_COMMITTED,
    session_id: int = 0,
    session_epoch: int = -1,
    rack_id: str = "",
    forgotten: Sequence[ForgottenTopic] = (),
) -> bytes:
    flexible = is_flexible(FETCH, version)
    w = Writer()
    if version < 15:
        w.int32(-1)  # replica_id: consumer
    w.int32(max_wait_ms)
    w.int32(min_bytes)
    w.int32(max_bytes)
    w.int8(isolation_level)
    if version >= 7:
        w.int32(session_id)
        w.int32(session_epoch)
    w.array_len(len(topics), flexible)
    for t in topics:
        _topic_ref(w, version, t.topic, t.topic_id)
        w.array_len(len(t.partitions), flexible)
        for p in t.partitions:
            w.int32(p.partition)
            if version >= 9:
                w.int32(p.current_leader_epoch)
            w.int64(p.fetch_offset)
            if version >= 12:
                w.int32(p.last_fetched_epoch)
            if version >= 5:
                w.int64(p.log_start_offset)
            w.int32(p.partition_max_bytes)
            w.empty_tags(flexible)
        w.empty_tags(flexible)
    if version >= 7:
        w.array_len(len(forgotten), flexible)
        for f in forgotten:
            _topic_ref(w, version, f.topic, f.topic_id)
            w.array_len(len(f.partitions), flexible)
            for partition in f.partitions:
                w.int32(partition)
            w.empty_tags(flexible)
    elif forgotten or session_id or session_epoch != -1:
        raise ValueError(f"Fetch v{version} has no fetch sessions")
    if version >= 11:
        w.string(rack_id, flexible)
    w.empty_tags(flexible)
    return w.getvalue()


def _topic_ref(w: Writer, version: int, topic: str, topic_id: uuid.UUID | None) -> None:
    if version >= FIRST_TOPIC_ID_VERSION:
        if topic_id is None or topic_id == ZERO_UUID:
            raise ValueError(f"Fetch v{version} needs a topic id for {topic!r}")
        w.uuid(topic_id)
    else:
        w.string(topic, is_flexible(FETCH, version))


def read_leader_tag(raw: memoryview) -> tuple[int, int]:
    r = Reader(raw)
    leader_id = r.int32()
    leader_epoch = r.int32()
    r.tagged_fields()
    return leader_id, leader_epoch


def read_node_endpoints(raw: memoryview) -> dict[int, BrokerMetadata]:
    r = Reader(raw)
    out: dict[int, BrokerMetadata] = {}
    for _ in range(r.array_len(True, 10)):
        node_id = r.int32()
        host = r.string(True)
        port = r.int32()
        rack = r.nullable_string(True)
        r.tagged_fields()
        out[node_id] = BrokerMetadata(node_id, host, port, rack)
    return out


@protocol_guard
def decode_fetch_response(body: memoryview | bytes, version: int) -> FetchResponse:
    if version < 4:
        raise ProtocolError(f"Fetch v{version} not supported")
    flexible = is_flexible(FETCH, version)
    by_id = version >= FIRST_TOPIC_ID_VERSION
    r = Reader(body)
    throttle = r.int32()
    error_code = 0
    session_id = 0
    if version >= 7:
        error_code = r.int16()
        session_id = r.int32()
    parts: list[FetchPartitionResponse] = []
    for _ in range(r.array_len(flexible, 2)):
        topic, topic_id = r.topic_ref(by_id, flexible)
        for _ in range(r.array_len(flexible, 26)):
            partition = r.int32()
            p_err = r.int16()
            hw = r.int64()
            lso = r.int64()
            log_start = r.int64() if version >= 5 else -1
            n_aborted = r.nullable_array_len(flexible, 16)
            aborted: tuple[AbortedTransaction, ...] | None = None
            if n_aborted is not None:
                items = []
                for _ in range(n_aborted):
                    items.append(AbortedTransaction(r.int64(), r.int64()))
                    r.skip_tagged_fields(flexible)
                aborted = tuple(items)
            preferred = r.int32() if version >= 11 else -1
            records = r.nullable_bytes(flexible)
            leader_id, leader_epoch = -1, -1
            if flexible:
                tags = r.tagged_fields()
                if 1 in tags:
                    leader_id, leader_epoch = read_leader_tag(tags[1])
            parts.append(
                FetchPartitionResponse(
                    topic,
                    topic_id,
                    partition,
                    p_err,
                    hw,
                    lso,
                    log_start,
                    aborted,
                    preferred,
                    records if records is not None else memoryview(b""),
                    leader_id,
                    leader_epoch,
                )
            )
        r.skip_tagged_fields(flexible)
    endpoints: dict[int, BrokerMetadata] = {}
    if flexible:
        tags = r.tagged_fields()
        if 0 in tags:
            endpoints = read_node_endpoints(tags[0])
    return FetchResponse(throttle, error_code, session_id, parts, endpoints)
