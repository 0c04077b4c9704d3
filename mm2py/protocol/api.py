"""Kafka API codecs we speak, version negotiation, ApiVersions and InitProducerId.

Encoders and decoders are our own (pure Python over :mod:`mm2py.protocol.wire`), checked in tests
against kio's generated message types (kio serves as the reference implementation). Why not decode
with kio directly: kio 0.6.5's native reader aborts the whole process (Rust OOM, uncatchable) when a
response announces a huge array length, which a fuzzable protocol layer must not do; and our Fetch
decoder returns the records field as a zero-copy view instead of a bytes copy.

Other APIs live in :mod:`api_metadata`, :mod:`api_fetch` and :mod:`api_produce`; this module
re-exports them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from mm2py.protocol.errors import UnsupportedError
from mm2py.protocol.errors_codes import UNSUPPORTED_VERSION
from mm2py.protocol.framing import is_flexible
from mm2py.protocol.wire import Reader, Writer, protocol_guard


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22
    SASL_AUTHENTICATE = 36


# Versions this client can encode/decode (inclusive ranges).
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 13),
    ApiKey.FETCH: (4, 16),
    ApiKey.LIST_OFFSETS: (1, 10),
    ApiKey.METADATA: (4, 13),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
}


def pick_version(
    api_key: int,
    broker_versions: Mapping[int, tuple[int, int]],
    ours: Mapping[int, tuple[int, int]] = SUPPORTED_VERSIONS,
    max_version: int | None = None,
) -> int:
    """Highest version supported by both sides (optionally capped). UnsupportedError if none."""
    if api_key not in ours:
        raise UnsupportedError(f"api key {api_key} not implemented by this client")
    if api_key not in broker_versions:
        raise UnsupportedError(f"broker does not support api key {api_key}")
    our_min, our_max = ours[api_key]
    b_min, b_max = broker_versions[api_key]
    hi = min(our_max, b_max)
    if max_version is not None:
        hi = min(hi, max_version)
    lo = max(our_min, b_min)
    if hi < lo:
        raise UnsupportedError(
            f"no common version for api key {api_key}: ours {our_min}..{our_max}, "
            f"broker {b_min}..{b_max}" + (f", cap {max_version}" if max_version is not None else "")
        )
    return hi


# ---------------------------------------------------------------------------- ApiVersions (18)


@dataclass(frozen=True, slots=True)
class ApiVersionsResponse:
    error_code: int
    api_versions: dict[int, tuple[int, int]]
    throttle_time_ms: int = 0
    finalized_features: dict[str, tuple[int, int]] = field(default_factory=dict)


def encode_api_versions_request(
    version: int, client_software_name: str = "mm2py", client_software_version: str = "0.1.0"
) -> bytes:
    w = Writer()
    if version >= 3:
        w.string(client_software_name, True)
        w.string(client_software_version, True)
        w.tagged_fields()
    return w.getvalue()


@protocol_guard
def decode_api_versions_response(body: memoryview | bytes, version: int) -> ApiVersionsResponse:
    """Decode ApiVersions. A broker that does not support ``version`` answers in v0 format with
    UNSUPPORTED_VERSION and its own supported range, which is handled here."""
    r = Reader(body)
    error_code = r.int16()
    if error_code == UNSUPPORTED_VERSION and version > 0:
        version = 0
    flexible = version >= 3
    versions: dict[int, tuple[int, int]] = {}
    for _ in range(r.array_len(flexible, 6)):
        key = r.int16()
        versions[key] = (r.int16(), r.int16())
        r.skip_tagged_fields(flexible)
    throttle = r.int32() if version >= 1 else 0
    features: dict[str, tuple[int, int]] = {}
    if flexible:
        tags = r.tagged_fields()
        raw = tags.get(2)  # finalized features: name, max_version_level, min_version_level
        if raw is not None:
            fr = Reader(raw)
            for _ in range(fr.array_len(True, 5)):
                name = fr.string(True)
                max_level = fr.int16()
                min_level = fr.int16()
                fr.skip_tagged_fields(True)
                features[name] = (min_level, max_level)
    return ApiVersionsResponse(error_code, versions, throttle, features)


# ------------------------------------------------------------------------- InitProducerId (22)


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    throttle_time_ms: int
    error_code: int
    producer_id: int
    producer_epoch: int


def encode_init_producer_id_request(
    version: int,
    transactional_id: str | None = None,
    transaction_timeout_ms: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
) -> bytes:
    flexible = is_flexible(ApiKey.INIT_PRODUCER_ID, version)
    w = Writer()
    w.nullable_string(transactional_id, flexible)
    w.int32(transaction_timeout_ms)
    if version >= 3:
        w.int64(producer_id)
        w.int16(producer_epoch)
    w.empty_tags(flexible)
    return w.getvalue()


@protocol_guard
def decode_init_producer_id_response(body: memoryview | bytes, version: int) -> InitProducerIdResponse:
    flexible = is_flexible(ApiKey.INIT_PRODUCER_ID, version)
    r = Reader(body)
    out = InitProducerIdResponse(r.int32(), r.int16(), r.int64(), r.int16())
    r.skip_tagged_fields(flexible)
    return out


from mm2py.protocol.api_fetch import (  # noqa: E402
    AbortedTransaction,
    FetchPartitionRequest,
    FetchPartitionResponse,
    FetchResponse,
    FetchTopicRequest,
    ForgottenTopic,
    decode_fetch_response,
    encode_fetch_request,
)
from mm2py.protocol.api_metadata import (  # noqa: E402
    BrokerMetadata,
    ListOffsetsPartitionResponse,
    MetadataPartition,
    MetadataResponse,
    MetadataTopic,
    decode_list_offsets_response,
    decode_metadata_response,
    encode_list_offsets_request,
    encode_metadata_request,
)
from mm2py.protocol.api_produce import (  # noqa: E402
    ProducePartitionResponse,
    ProduceResponse,
    ProduceTopicRequest,
    decode_produce_response,
    encode_produce_request,
)

__all__ = [
    "SUPPORTED_VERSIONS",
    "AbortedTransaction",
    "ApiKey",
    "ApiVersionsResponse",
    "BrokerMetadata",
    "FetchPartitionRequest",
    "FetchPartitionResponse",
    "FetchResponse",
    "FetchTopicRequest",
    "ForgottenTopic",
    "InitProducerIdResponse",
    "ListOffsetsPartitionResponse",
    "MetadataPartition",
    "MetadataResponse",
    "MetadataTopic",
    "ProducePartitionResponse",
    "ProduceResponse",
    "ProduceTopicRequest",
    "decode_api_versions_response",
    "decode_fetch_response",
    "decode_init_producer_id_response",
    "decode_list_offsets_response",
    "decode_metadata_response",
    "decode_produce_response",
    "encode_api_versions_request",
    "encode_fetch_request",
    "encode_init_producer_id_request",
    "encode_list_offsets_request",
    "encode_metadata_request",
    "encode_produce_request",
    "pick_version",
]
