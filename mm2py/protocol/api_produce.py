"""Produce (api key 0) codec, versions 3..13.

The records field of each partition carries exactly one RecordBatch, passed in as bytes or a
memoryview and written without intermediate copies (the single copy is the final join of the
request body). v9 is flexible; v13 identifies topics by topic id.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from mm2py.protocol.api_fetch import read_leader_tag, read_node_endpoints
from mm2py.protocol.api_metadata import BrokerMetadata
from mm2py.protocol.framing import is_flexible
from mm2py.protocol.wire import Buf, Reader, Writer, protocol_guard

PRODUCE = 0
FIRST_TOPIC_ID_VERSION = 13


@dataclass(frozen=True, slots=True)
class ProduceTopicRequest:
    topic: str
    partitions: Sequence[tuple[int, Buf]]  # (partition, one record batch)
    topic_id: uuid.UUID | None = None  # required for v13+


@dataclass(frozen=True, slots=True)
class ProducePartitionResponse:
    topic: str | None  # None for v13+ (identified by topic_id)
    topic_id: uuid.UUID | None
    partition: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_errors: tuple[tuple[int, str | None], ...] = ()
    error_message: str | None = None
    current_leader_id: int = -1
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    partitions: list[ProducePartitionResponse]
    throttle_time_ms: int
    node_endpoints: dict[int, BrokerMetadata] = field(default_factory=dict)


def encode_produce_request(
    version: int,
    topics: Sequence[ProduceTopicRequest],
    *,
    acks: int = -1,
    timeout_ms: int = 30_000,
    transactional_id: str | None = None,
) -> bytes:
    flexible = is_flexible(PRODUCE, version)
    w = Writer()
    w.nullable_string(transactional_id, flexible)
    w.int16(acks)
    w.int32(timeout_ms)
    w.array_len(len(topics), flexible)
    for t in topics:
        if version >= FIRST_TOPIC_ID_VERSION:
            if t.topic_id is None or t.topic_id.int == 0:
                raise ValueError(f"Produce v{version} needs a topic id for {t.topic!r}")
            w.uuid(t.topic_id)
        else:
            w.string(t.topic, flexible)
        w.array_len(len(t.partitions), flexible)
        for partition, batch in t.partitions:
            w.int32(partition)
            w.nullable_bytes(batch, flexible)
            w.empty_tags(flexible)
        w.empty_tags(flexible)
    w.empty_tags(flexible)
    return w.getvalue()


@protocol_guard
def decode_produce_response(body: memoryview | bytes, version: int) -> ProduceResponse:
    flexible = is_flexible(PRODUCE, version)
    by_id = version >= FIRST_TOPIC_ID_VERSION
    r = Reader(body)
    out: list[ProducePartitionResponse] = []
    for _ in range(r.array_len(flexible, 2)):
        topic, topic_id = r.topic_ref(by_id, flexible)
        for _ in range(r.array_len(flexible, 22)):
            partition = r.int32()
            err = r.int16()
            base = r.int64()
            append_time = r.int64()
            log_start = r.int64() if version >= 5 else -1
            record_errors: list[tuple[int, str | None]] = []
            message: str | None = None
            if version >= 8:
                for _ in range(r.array_len(flexible, 5)):
                    idx = r.int32()
                    record_errors.append((idx, r.nullable_string(flexible)))
                    r.skip_tagged_fields(flexible)
                message = r.nullable_string(flexible)
            leader_id, leader_epoch = -1, -1
            if flexible:
                tags = r.tagged_fields()
                if 0 in tags:
                    leader_id, leader_epoch = read_leader_tag(tags[0])
            out.append(
                ProducePartitionResponse(
                    topic,
                    topic_id,
                    partition,
                    err,
                    base,
                    append_time,
                    log_start,
                    tuple(record_errors),
                    message,
                    leader_id,
                    leader_epoch,
                )
            )
        r.skip_tagged_fields(flexible)
    throttle = r.int32()
    endpoints: dict[int, BrokerMetadata] = {}
    if flexible:
        tags = r.tagged_fields()
        if 0 in tags:
            endpoints = read_node_endpoints(tags[0])
    return ProduceResponse(out, throttle, endpoints)
