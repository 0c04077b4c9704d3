"""The ``__consumer_offsets`` codec on bytes: layouts written out by hand, every value version, real
broker bytes, tombstones, and malformed input (a clear ProtocolError, nothing else)."""

from __future__ import annotations

import contextlib
import struct
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mm2py.protocol.consumer_offsets import (
    CommittedOffset,
    GroupRecord,
    MalformedConsumerOffsetsError,
    OffsetCommit,
    OtherRecord,
    decode_record,
    encode_group_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from mm2py.protocol.errors import ProtocolError, TruncatedError, UnsupportedError
from mm2py.protocol.types import TopicPartition
from tests.support.hypothesis_examples import examples

TP = TopicPartition("orders", 3)


def _s(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


KEY = struct.pack(">h", 1) + _s("g1") + _s("orders") + struct.pack(">i", 3)


def test_offset_commit_key_and_value_laid_out_by_hand() -> None:
    # version 3: offset, leaderEpoch, metadata, commitTimestamp
    value = struct.pack(">hqi", 3, 42, 7) + _s("meta") + struct.pack(">q", 1_700_000_000_123)
    assert decode_record(KEY, value) == OffsetCommit(
        "g1", TP, CommittedOffset(42, "meta", 1_700_000_000_123, 7))
    assert encode_offset_commit_key("g1", TP) == KEY
    assert encode_offset_commit_value(CommittedOffset(42, "meta", 1_700_000_000_123, 7)) == value


@pytest.mark.parametrize("version,value", [
    (0, struct.pack(">hq", 0, 5) + _s("") + struct.pack(">q", 99)),
    (1, struct.pack(">hq", 1, 5) + _s("") + struct.pack(">qq", 99, 12345)),  # expireTimestamp
    (2, struct.pack(">hq", 2, 5) + _s("") + struct.pack(">q", 99)),
    (3, struct.pack(">hqi", 3, 5, -1) + _s("") + struct.pack(">q", 99)),
    # flexible: compact string (length + 1), then an empty tagged-field section
    (4, struct.pack(">hqi", 4, 5, -1) + b"\x01" + struct.pack(">q", 99) + b"\x00"),
])
def test_every_value_version(version: int, value: bytes) -> None:
    assert decode_record(KEY, value) == OffsetCommit("g1", TP, CommittedOffset(5, "", 99, -1))
    if version != 1:  # the encoder writes no expiry time (-1); the decoder skips whichever there is
        assert encode_offset_commit_value(CommittedOffset(5, "", 99), version) == value


def test_version_4_skips_tagged_fields() -> None:
    value = encode_offset_commit_value(CommittedOffset(8, "m", 1, 2), 4, tags={0: b"\x11" * 16, 5: b"x"})
    assert decode_record(KEY, value) == OffsetCommit("g1", TP, CommittedOffset(8, "m", 1, 2))


def test_key_type_0_is_an_offset_commit_too() -> None:
    key = encode_offset_commit_key("g", TP, record_type=0)
    assert decode_record(key, None) == OffsetCommit("g", TP, None)


def test_tombstones() -> None:
    assert decode_record(KEY, None) == OffsetCommit("g1", TP, None)  # the offset was deleted
    assert decode_record(encode_group_key("g1"), None) == GroupRecord("g1", deleted=True)
    members = b"whatever the members are"  # not read
    assert decode_record(encode_group_key("g1"), members) == GroupRecord("g1", deleted=False)


def test_other_record_types_are_not_read() -> None:
    # a new-protocol consumer group's records (types 3 and up) carry no committed offsets
    assert decode_record(struct.pack(">h", 3) + b"\x00\x01anything", b"\x00") == OtherRecord(3)


#: records a Kafka 4.1.1 broker wrote to ``__consumer_offsets`` (read back from a test cluster): a
#: group that never joined committing offset 17 of ``t-0`` (value version 4, flexible), then a group
#: that joined, committed offset 1 with leader epoch 0, and was deleted (offset and group tombstones)
REAL = [
    ("00010006672d6c69766500017400000000", "00040000000000000011ffffffff01000001a2214f63cf00",
     OffsetCommit("g-live", TopicPartition("t", 0), CommittedOffset(17, "", 1795855180751, -1))),
    ("00020008672d6a6f696e6564", "0003000000000000ffffffff000001a2214f8adc00000000",
     GroupRecord("g-joined", deleted=False)),
    ("00010008672d6a6f696e656400017400000000", "000400000000000000010000000001000001a2214f8b8c00",
     OffsetCommit("g-joined", TopicPartition("t", 0), CommittedOffset(1, "", 1795855190924, 0))),
    ("00010008672d6a6f696e656400017400000000", None, OffsetCommit("g-joined", TopicPartition("t", 0), None)),
    ("00020008672d6a6f696e6564", None, GroupRecord("g-joined", deleted=True)),
]


@pytest.mark.parametrize("key,value,expected", REAL)
def test_bytes_a_broker_wrote(key: str, value: str | None, expected: object) -> None:
    assert decode_record(bytes.fromhex(key), None if value is None else bytes.fromhex(value)) == expected


@pytest.mark.parametrize("key,value,error,needle", [
    (None, b"", MalformedConsumerOffsetsError, "without a key"),
    (b"\x00", None, TruncatedError, "need 2 bytes"),
    (struct.pack(">h", -4), None, MalformedConsumerOffsetsError, "negative record type"),
    (KEY + b"\x00", None, MalformedConsumerOffsetsError, "1 bytes after the offset commit key"),
    (KEY[:-2], None, TruncatedError, "need 4 bytes"),
    (struct.pack(">h", 1) + b"\xff\xff", None, ProtocolError, "null string"),
    (struct.pack(">h", 1) + struct.pack(">h", 2) + b"\xff\xfe", None, ProtocolError, "UTF-8"),
    (struct.pack(">h", 1) + _s("g") + _s("t") + struct.pack(">i", -1), None,
     MalformedConsumerOffsetsError, "negative partition"),
    (encode_group_key("g") + b"!", None, MalformedConsumerOffsetsError, "after the group metadata key"),
    (KEY, struct.pack(">h", 5) + bytes(30), UnsupportedError, "version 5"),
    (KEY, struct.pack(">h", -1) + bytes(30), MalformedConsumerOffsetsError, "negative offset commit value"),
    (KEY, encode_offset_commit_value(CommittedOffset(1)) + b"\x00", MalformedConsumerOffsetsError,
     "1 bytes after the offset commit value v3"),
    (KEY, encode_offset_commit_value(CommittedOffset(1))[:-1], TruncatedError, "need 8 bytes"),
    (KEY, b"", TruncatedError, "need 2 bytes"),
])
def test_malformed_input_is_a_clear_protocol_error(
    key: bytes | None, value: bytes | None, error: type[Exception], needle: str
) -> None:
    with pytest.raises(error, match=needle):
        decode_record(key, value)


def test_every_truncation_of_a_valid_record_is_a_protocol_error() -> None:
    value = encode_offset_commit_value(CommittedOffset(3, "meta", 4, 5), 4, tags={1: b"abc"})
    for cut in range(len(KEY)):
        with pytest.raises(ProtocolError):
            decode_record(KEY[:cut], value)
    for cut in range(len(value)):
        with pytest.raises(ProtocolError):
            decode_record(KEY, value[:cut])


def test_encoders_refuse_what_no_broker_writes() -> None:
    with pytest.raises(ValueError, match="type 0 or 1"):
        encode_offset_commit_key("g", TP, record_type=2)
    with pytest.raises(ValueError, match="versions are 0-4"):
        encode_offset_commit_value(CommittedOffset(1), 5)
    with pytest.raises(ValueError, match="tagged fields need version 4"):
        encode_offset_commit_value(CommittedOffset(1), 3, tags={0: b""})


@settings(max_examples=examples(300), deadline=timedelta(milliseconds=500),
          suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=64), st.one_of(st.none(), st.binary(max_size=64)))
def test_random_bytes_raise_only_protocol_errors(key: bytes, value: bytes | None) -> None:
    with contextlib.suppress(ProtocolError):
        decode_record(key, value)


@settings(max_examples=examples(300), deadline=timedelta(milliseconds=500),
          suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=20), st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1),
       st.integers(-(2**63), 2**63 - 1), st.text(max_size=30), st.integers(0, 4), st.integers(0, 60))
def test_round_trip_and_bit_flips(group: str, topic: str, partition: int, offset: int, metadata: str,
                                  version: int, flip: int) -> None:
    tp = TopicPartition(topic, partition)
    committed = CommittedOffset(offset, metadata, 1_700_000_000_000, 4 if version >= 3 else -1)
    key, value = encode_offset_commit_key(group, tp), encode_offset_commit_value(committed, version)
    assert decode_record(key, value) == OffsetCommit(group, tp, committed)
    mangled = bytearray(value)
    mangled[flip % len(mangled)] ^= 0xFF
    with contextlib.suppress(ProtocolError):
        decode_record(key, bytes(mangled))
