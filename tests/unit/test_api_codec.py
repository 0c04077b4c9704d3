"""API codecs checked against kio's generated message types (the reference implementation).

Responses: random kio entities are serialized with kio's writer and decoded with ours.
Requests: ours are encoded and parsed back with kio's reader.
Fuzz: every response decoder, every version, only raises ProtocolError subclasses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import io
import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from mm2py.protocol import api
from mm2py.protocol.api import (
    SUPPORTED_VERSIONS,
    ApiKey,
    FetchPartitionRequest,
    FetchTopicRequest,
    ProduceTopicRequest,
    pick_version,
)
from mm2py.protocol.errors import ProtocolError, UnsupportedError
from mm2py.protocol.wire import ZERO_UUID
from tests.support.hypothesis_examples import examples

MODULE: dict[int, str] = {
    ApiKey.PRODUCE: "produce",
    ApiKey.FETCH: "fetch",
    ApiKey.LIST_OFFSETS: "list_offsets",
    ApiKey.METADATA: "metadata",
    ApiKey.API_VERSIONS: "api_versions",
    ApiKey.INIT_PRODUCER_ID: "init_producer_id",
}
DECODERS: dict[int, Callable[[Any, int], Any]] = {
    ApiKey.PRODUCE: api.decode_produce_response,
    ApiKey.FETCH: api.decode_fetch_response,
    ApiKey.LIST_OFFSETS: api.decode_list_offsets_response,
    ApiKey.METADATA: api.decode_metadata_response,
    ApiKey.API_VERSIONS: api.decode_api_versions_response,
    ApiKey.INIT_PRODUCER_ID: api.decode_init_producer_id_response,
}
ALL_VERSIONS = [(k, v) for k, (lo, hi) in SUPPORTED_VERSIONS.items() for v in range(lo, hi + 1)]


def kio_class(api_key: int, version: int, kind: str) -> type:
    mod = importlib.import_module(f"kio.schema.{MODULE[api_key]}.v{version}.{kind}")
    for obj in vars(mod).values():
        entity_type = getattr(obj, "__type__", None)
        if dataclasses.is_dataclass(obj) and entity_type is not None and entity_type.name == kind:
            return obj  # type: ignore[return-value]
    raise LookupError(kind)


# ------------------------------------------------------------------ random kio entity generator


def _prim(kafka_type: str, optional: bool, rnd: random.Random) -> Any:
    if optional and rnd.random() < 0.2:
        return None
    match kafka_type:
        case "int8":
            return rnd.randint(-128, 127)
        case "int16":
            return rnd.randint(-(2**15), 2**15 - 1)
        case "int32":
            return rnd.randint(-(2**31), 2**31 - 1)
        case "int64":
            return rnd.randint(-(2**63), 2**63 - 1)
        case "bool":
            return rnd.random() < 0.5
        case "string":
            return "".join(rnd.choice("abcxyzé-_.🙂") for _ in range(rnd.randint(0, 12)))
        case "bytes" | "records":
            return rnd.randbytes(rnd.randint(0, 200))
        case "uuid":
            return uuid.UUID(int=rnd.getrandbits(128))
        case "error_code":
            return rnd.choice(list(ErrorCode))
        case "timedelta_i32":
            return datetime.timedelta(milliseconds=rnd.randint(0, 2**31 - 1))
        case "datetime_i64":
            ms = rnd.randint(0, 4_000_000_000_000)
            return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    raise NotImplementedError(kafka_type)


def gen_entity(cls: type, rnd: random.Random) -> Any:
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tag = get_field_tag(f)
        if tag is not None and rnd.random() < 0.3:
            continue  # keep the default
        optional = is_optional(f) and tag is None
        kind = classify_field(f)
        n = rnd.randint(0, 3)
        if isinstance(kind, PrimitiveField):
            values[f.name] = _prim(get_schema_field_type(f), optional, rnd)
        elif isinstance(kind, PrimitiveTupleField):
            t = get_schema_field_type(f)
            values[f.name] = None if optional and n == 0 else tuple(_prim(t, False, rnd) for _ in range(n))
        elif isinstance(kind, EntityField):
            values[f.name] = gen_entity(kind.type_, rnd)
        elif isinstance(kind, EntityTupleField):
            if optional and rnd.random() < 0.3:
                values[f.name] = None
            else:
                values[f.name] = tuple(gen_entity(kind.type_, rnd) for _ in range(n))
    return cls(**values)


def kio_encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _ms(value: datetime.timedelta | datetime.datetime | None) -> int:
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return round(value.timestamp() * 1000)


def _uuid_or_none(u: uuid.UUID | None) -> uuid.UUID | None:
    return None if u is None or u == ZERO_UUID else u


# ------------------------------------------------------------------------- response round trips

SEEDS = range(12)


@pytest.mark.parametrize("version", range(4, 17))
@pytest.mark.parametrize("seed", SEEDS)
def test_fetch_response_matches_kio(version: int, seed: int) -> None:
    k = gen_entity(kio_class(ApiKey.FETCH, version, "response"), random.Random(seed * 100 + version))
    ours = api.decode_fetch_response(kio_encode(k), version)
    assert ours.throttle_time_ms == _ms(k.throttle_time)
    if version >= 7:
        assert (ours.error_code, ours.session_id) == (k.error_code, k.session_id)
    expected = []
    for t in k.responses:
        for p in t.partitions:
            aborted = (
                None
                if p.aborted_transactions is None
                else tuple((a.producer_id, a.first_offset) for a in p.aborted_transactions)
            )
            leader = (
                (p.current_leader.leader_id, p.current_leader.leader_epoch) if version >= 12 else (-1, -1)
            )
            expected.append((
                t.topic if version < 13 else None,
                t.topic_id if version >= 13 else None,
                p.partition_index, int(p.error_code), p.high_watermark, p.last_stable_offset,
                p.log_start_offset if version >= 5 else -1, aborted,
                p.preferred_read_replica if version >= 11 else -1, p.records or b"", leader,
            ))  # fmt: skip
    got = [
        (
            p.topic, p.topic_id, p.partition, p.error_code, p.high_watermark,
            p.last_stable_offset, p.log_start_offset,
            None if p.aborted_transactions is None
            else tuple((a.producer_id, a.first_offset) for a in p.aborted_transactions),
            p.preferred_read_replica, bytes(p.records),
            (p.current_leader_id, p.current_leader_epoch),
        )
        for p in ours.partitions
    ]  # fmt: skip
    assert got == expected
    if version >= 16:
        assert {n.node_id: (n.host, n.port, n.rack) for n in k.node_endpoints} == {
            i: (b.host, b.port, b.rack) for i, b in ours.node_endpoints.items()
        }


@pytest.mark.parametrize("version", range(3, 14))
@pytest.mark.parametrize("seed", SEEDS)
def test_produce_response_matches_kio(version: int, seed: int) -> None:
    k = gen_entity(kio_class(ApiKey.PRODUCE, version, "response"), random.Random(seed * 100 + version))
    ours = api.decode_produce_response(kio_encode(k), version)
    assert ours.throttle_time_ms == _ms(k.throttle_time)
    expected = []
    for t in k.responses:
        for p in t.partition_responses:
            expected.append((
                t.name if version < 13 else None, t.topic_id if version >= 13 else None,
                p.index, int(p.error_code), p.base_offset, _ms(p.log_append_time),
                p.log_start_offset if version >= 5 else -1,
                tuple((e.batch_index, e.batch_index_error_message) for e in p.record_errors)
                if version >= 8 else (),
                p.error_message if version >= 8 else None,
                (p.current_leader.leader_id, p.current_leader.leader_epoch)
                if version >= 10 else (-1, -1),
            ))  # fmt: skip
    got = [
        (p.topic, p.topic_id, p.partition, p.error_code, p.base_offset, p.log_append_time_ms,
         p.log_start_offset, p.record_errors, p.error_message,
         (p.current_leader_id, p.current_leader_epoch))
        for p in ours.partitions
    ]  # fmt: skip
    assert got == expected


@pytest.mark.parametrize("version", range(4, 14))
@pytest.mark.parametrize("seed", SEEDS)
def test_metadata_response_matches_kio(version: int, seed: int) -> None:
    k = gen_entity(kio_class(ApiKey.METADATA, version, "response"), random.Random(seed * 100 + version))
    ours = api.decode_metadata_response(kio_encode(k), version)
    # brokers: later duplicates win in our dict, like a map
    assert ours.brokers == {
        b.node_id: api.BrokerMetadata(b.node_id, b.host, b.port, b.rack) for b in k.brokers
    }
    assert (ours.cluster_id, ours.controller_id) == (k.cluster_id, k.controller_id)
    assert ours.error_code == (k.error_code if version >= 13 else 0)
    assert len(ours.topics) == len(k.topics)
    for o, t in zip(ours.topics, k.topics, strict=True):
        assert (o.error_code, o.name, o.is_internal) == (t.error_code, t.name, t.is_internal)
        assert o.topic_id == (_uuid_or_none(t.topic_id) if version >= 10 else None)
        assert [
            (p.error_code, p.partition, p.leader_id, p.leader_epoch, p.replicas, p.isr,
             p.offline_replicas)
            for p in o.partitions
        ] == [
            (int(p.error_code), p.partition_index, p.leader_id,
             p.leader_epoch if version >= 7 else -1, tuple(p.replica_nodes), tuple(p.isr_nodes),
             tuple(p.offline_replicas) if version >= 5 else ())
            for p in t.partitions
        ]  # fmt: skip


@pytest.mark.parametrize("version", range(1, 11))
@pytest.mark.parametrize("seed", SEEDS)
def test_list_offsets_response_matches_kio(version: int, seed: int) -> None:
    cls = kio_class(ApiKey.LIST_OFFSETS, version, "response")
    k = gen_entity(cls, random.Random(seed * 100 + version))
    ours = api.decode_list_offsets_response(kio_encode(k), version)
    got = [(o.topic, o.partition, o.error_code, o.timestamp, o.offset, o.leader_epoch) for o in ours]
    assert got == [
        (t.name, p.partition_index, int(p.error_code), p.timestamp, p.offset,
         p.leader_epoch if version >= 4 else -1)
        for t in k.topics for p in t.partitions
    ]  # fmt: skip


@pytest.mark.parametrize("version", range(0, 4))
@pytest.mark.parametrize("seed", SEEDS)
def test_api_versions_response_matches_kio(version: int, seed: int) -> None:
    k = gen_entity(kio_class(ApiKey.API_VERSIONS, version, "response"), random.Random(seed))
    if k.error_code == ErrorCode.unsupported_version:
        k = dataclasses.replace(k, error_code=ErrorCode.none)
    ours = api.decode_api_versions_response(kio_encode(k), version)
    assert ours.error_code == k.error_code
    assert ours.api_versions == {a.api_key: (a.min_version, a.max_version) for a in k.api_keys}
    assert ours.throttle_time_ms == (_ms(k.throttle_time) if version >= 1 else 0)
    if version >= 3:
        assert ours.finalized_features == {
            f.name: (f.min_version_level, f.max_version_level) for f in k.finalized_features
        }


def test_api_versions_unsupported_version_answer_is_v0() -> None:
    """A broker answers an unsupported ApiVersions version in v0 format with error 35."""
    v0 = kio_class(ApiKey.API_VERSIONS, 0, "response")
    item: Any = v0.__dataclass_fields__["api_keys"].type.__args__[0]  # type: ignore[attr-defined]
    k = v0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(item(api_key=18, min_version=0, max_version=2),),
    )
    ours = api.decode_api_versions_response(kio_encode(k), 3)
    assert ours.error_code == 35
    assert ours.api_versions == {18: (0, 2)}


@pytest.mark.parametrize("version", range(0, 6))
def test_init_producer_id_response_matches_kio(version: int) -> None:
    k = gen_entity(kio_class(ApiKey.INIT_PRODUCER_ID, version, "response"), random.Random(version))
    ours = api.decode_init_producer_id_response(kio_encode(k), version)
    assert (ours.throttle_time_ms, ours.error_code, ours.producer_id, ours.producer_epoch) == (
        _ms(k.throttle_time), k.error_code, k.producer_id, k.producer_epoch,
    )  # fmt: skip


# ------------------------------------------------------------------------- request round trips


def kio_decode_request(api_key: int, version: int, body: bytes) -> Any:
    value: Any
    value, size = entity_reader(kio_class(api_key, version, "request"))(body, 0)
    assert size == len(body), "trailing bytes after request"
    return value


@pytest.mark.parametrize("version", range(4, 17))
def test_fetch_request_parsed_by_kio(version: int) -> None:
    tid = uuid.uuid4()
    parts = [FetchPartitionRequest(0, 10, 1000, 5, 3, 4), FetchPartitionRequest(7, 2**40, 77)]
    body = api.encode_fetch_request(
        version, [FetchTopicRequest("tópic", parts, tid)], max_wait_ms=250, min_bytes=3,
        max_bytes=12345, isolation_level=1, rack_id="r1",
    )  # fmt: skip
    k = kio_decode_request(ApiKey.FETCH, version, body)
    assert (_ms(k.max_wait), k.min_bytes, k.max_bytes, k.isolation_level) == (250, 3, 12345, 1)
    if version < 15:
        assert k.replica_id == -1
    if version >= 7:
        assert (k.session_id, k.session_epoch, k.forgotten_topics_data) == (0, -1, ())
    if version >= 11:
        assert k.rack_id == "r1"
    (topic,) = k.topics
    assert (topic.topic_id if version >= 13 else topic.topic) == (tid if version >= 13 else "tópic")
    got = [(p.partition, p.fetch_offset, p.partition_max_bytes) for p in topic.partitions]
    assert got == [(0, 10, 1000), (7, 2**40, 77)]
    if version >= 9:
        assert topic.partitions[0].current_leader_epoch == 5
    if version >= 5:
        assert topic.partitions[0].log_start_offset == 3
    if version >= 12:
        assert topic.partitions[0].last_fetched_epoch == 4


@pytest.mark.parametrize("version", range(7, 17))
def test_fetch_session_request_parsed_by_kio(version: int) -> None:
    tid, gone = uuid.uuid4(), uuid.uuid4()
    body = api.encode_fetch_request(
        version, [FetchTopicRequest("t", [FetchPartitionRequest(1, 5)], tid)], session_id=123456,
        session_epoch=7, forgotten=[api.ForgottenTopic("old", [3, 0, 9], gone)],
    )  # fmt: skip
    k = kio_decode_request(ApiKey.FETCH, version, body)
    assert (k.session_id, k.session_epoch) == (123456, 7)
    (forgotten,) = k.forgotten_topics_data
    assert (forgotten.topic_id if version >= 13 else forgotten.topic) == (gone if version >= 13 else "old")
    assert list(forgotten.partitions) == [3, 0, 9]


def test_fetch_sessions_need_v7() -> None:
    with pytest.raises(ValueError, match="no fetch sessions"):
        api.encode_fetch_request(6, [], session_id=1, session_epoch=1)


def test_fetch_request_v13_needs_topic_id() -> None:
    with pytest.raises(ValueError):
        api.encode_fetch_request(13, [FetchTopicRequest("t", [FetchPartitionRequest(0, 0)])])


@pytest.mark.parametrize("version", range(3, 14))
def test_produce_request_parsed_by_kio(version: int) -> None:
    tid = uuid.uuid4()
    b1, b2 = random.Random(version).randbytes(300), b"\x00" * 61
    body = api.encode_produce_request(
        version,
        [ProduceTopicRequest("t1", [(0, b1), (3, memoryview(b2))], tid)],
        acks=-1, timeout_ms=1500, transactional_id=None,
    )  # fmt: skip
    k = kio_decode_request(ApiKey.PRODUCE, version, body)
    assert (k.acks, _ms(k.timeout), k.transactional_id) == (-1, 1500, None)
    (t,) = k.topic_data
    assert (t.topic_id if version >= 13 else t.name) == (tid if version >= 13 else "t1")
    assert [(p.index, p.records) for p in t.partition_data] == [(0, b1), (3, b2)]


@pytest.mark.parametrize("version", range(4, 14))
@pytest.mark.parametrize("topics", [None, ["a", "bb"]])
def test_metadata_request_parsed_by_kio(version: int, topics: list[str] | None) -> None:
    k = kio_decode_request(ApiKey.METADATA, version, api.encode_metadata_request(version, topics, True))
    assert k.allow_auto_topic_creation is True
    assert (None if k.topics is None else [t.name for t in k.topics]) == topics


@pytest.mark.parametrize("version", range(1, 11))
def test_list_offsets_request_parsed_by_kio(version: int) -> None:
    body = api.encode_list_offsets_request(version, [("x", [(0, -1), (2, -2)])], 1, 999)
    k = kio_decode_request(ApiKey.LIST_OFFSETS, version, body)
    assert [(t.name, [(p.partition_index, p.timestamp) for p in t.partitions]) for t in k.topics] == [
        ("x", [(0, -1), (2, -2)])
    ]
    if version >= 2:
        assert k.isolation_level == 1
    if version >= 10:
        assert _ms(k.timeout) == 999


@pytest.mark.parametrize("version", range(0, 4))
def test_api_versions_request_parsed_by_kio(version: int) -> None:
    k = kio_decode_request(ApiKey.API_VERSIONS, version, api.encode_api_versions_request(version, "n", "1"))
    if version >= 3:
        assert (k.client_software_name, k.client_software_version) == ("n", "1")


@pytest.mark.parametrize("version", range(0, 6))
def test_init_producer_id_request_parsed_by_kio(version: int) -> None:
    body = api.encode_init_producer_id_request(version, "tx", 6000, 12, 3)
    k = kio_decode_request(ApiKey.INIT_PRODUCER_ID, version, body)
    assert (k.transactional_id, _ms(k.transaction_timeout)) == ("tx", 6000)
    if version >= 3:
        assert (k.producer_id, k.producer_epoch) == (12, 3)


# ---------------------------------------------------------------------------- negotiation


def test_pick_version_highest_common() -> None:
    broker = {0: (0, 11), 1: (4, 17), 18: (0, 4)}
    assert pick_version(ApiKey.PRODUCE, broker) == 11
    assert pick_version(ApiKey.FETCH, broker) == 16
    assert pick_version(ApiKey.FETCH, broker, max_version=12) == 12
    assert pick_version(ApiKey.API_VERSIONS, broker) == 3


def test_pick_version_no_overlap() -> None:
    with pytest.raises(UnsupportedError):
        pick_version(ApiKey.FETCH, {1: (0, 3)})  # old broker only speaks Fetch v0-3
    with pytest.raises(UnsupportedError):
        pick_version(ApiKey.PRODUCE, {1: (4, 16)})  # broker lacks Produce
    with pytest.raises(UnsupportedError):
        pick_version(99, {99: (0, 1)})  # we do not implement it
    with pytest.raises(UnsupportedError):
        pick_version(ApiKey.FETCH, {1: (4, 16)}, max_version=3)


# ------------------------------------------------------------------------------- fuzzing


def _valid_samples(api_key: int, version: int) -> list[bytes]:
    cls = kio_class(api_key, version, "response")
    return [kio_encode(gen_entity(cls, random.Random(s))) for s in range(4)]


_SAMPLES = {kv: _valid_samples(*kv) for kv in ALL_VERSIONS}


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_decoders_only_raise_protocol_errors(api_key: int, version: int, data: st.DataObject) -> None:
    decode = DECODERS[api_key]
    sample = data.draw(st.sampled_from(_SAMPLES[(api_key, version)]))
    mode = data.draw(st.sampled_from(["random", "truncate", "flip", "splice"]))
    if mode == "random":
        buf = data.draw(st.binary(max_size=300))
    elif mode == "truncate":
        buf = sample[: data.draw(st.integers(0, max(0, len(sample) - 1)))]
    elif mode == "flip":
        b = bytearray(sample)
        for _ in range(data.draw(st.integers(1, 6))):
            if b:
                b[data.draw(st.integers(0, len(b) - 1))] = data.draw(st.integers(0, 255))
        buf = bytes(b)
    else:
        at = data.draw(st.integers(0, len(sample)))
        buf = sample[:at] + data.draw(st.binary(min_size=1, max_size=8)) + sample[at:]
    with contextlib.suppress(ProtocolError):
        decode(buf, version)


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_decoders_reject_huge_array_lengths(api_key: int, version: int) -> None:
    """Lengths that would make kio's native reader abort the process are plain ProtocolErrors."""
    for prefix in (b"", b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"):
        for length in (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x07"):
            with contextlib.suppress(ProtocolError):
                DECODERS[api_key](prefix + length + b"\x00" * 8, version)
