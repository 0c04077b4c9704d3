"""Golden-byte and robustness tests for MM2 internal record codecs.

Expected bytes are written out by hand from the Struct layout (int16-length strings, big-endian
ints), not produced by the encoder under test.
"""

from __future__ import annotations

import contextlib
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mm2py.protocol.errors import ProtocolError, TruncatedError, UnsupportedError
from mm2py.protocol.mm2_records import Checkpoint, Heartbeat, MalformedRecordError, OffsetSync
from mm2py.protocol.types import TopicPartition

# ------------------------------------------------------------------------------------- golden


def test_offset_sync_key_golden() -> None:
    sync = OffsetSync(TopicPartition("foo", 0), 0, 0)
    assert sync.key_bytes() == bytes.fromhex("0003 666f6f 00000000")


def test_offset_sync_value_golden() -> None:
    # upstream 258 = 0x102, downstream -1 (all ones)
    sync = OffsetSync(TopicPartition("t", 7), 258, -1)
    assert sync.value_bytes() == bytes.fromhex("0000000000000102 ffffffffffffffff")
    assert sync.key_bytes() == bytes.fromhex("0001 74 00000007")


def test_offset_sync_decode_golden() -> None:
    key = bytes.fromhex("0006 6f7264657273 00000003")  # "orders", partition 3
    value = bytes.fromhex("000000000000002a 0000000100000000")  # 42, 2**32
    sync = OffsetSync.from_record(key, value)
    assert sync == OffsetSync(TopicPartition("orders", 3), 42, 1 << 32)


def test_checkpoint_golden() -> None:
    cp = Checkpoint("g1", TopicPartition("east.foo", 2), 100, 90, "meta")
    # group "g1" | topic "east.foo" | partition 2
    assert cp.key_bytes() == bytes.fromhex("0002 6731  0008 656173742e666f6f  00000002")
    # version 0 | upstream 100 | downstream 90 | metadata "meta"
    assert cp.value_bytes() == bytes.fromhex("0000  0000000000000064  000000000000005a  0004 6d657461")


def test_checkpoint_empty_metadata_golden() -> None:
    cp = Checkpoint("g", TopicPartition("t", 0), 1, 2, "")
    assert cp.value_bytes() == bytes.fromhex("0000 0000000000000001 0000000000000002 0000")


def test_heartbeat_golden() -> None:
    hb = Heartbeat("east", "west", 1_700_000_000_000)
    assert hb.key_bytes() == bytes.fromhex("0004 65617374 0004 77657374")
    # 1_700_000_000_000 = 0x18BCFE56800
    assert hb.value_bytes() == bytes.fromhex("0000 0000018bcfe56800")


def test_heartbeat_decode_golden() -> None:
    key = bytes.fromhex("0001 61 0001 62")
    value = bytes.fromhex("0000 00000000000003e8")
    assert Heartbeat.from_record(key, value) == Heartbeat("a", "b", 1000)


def test_utf8_length_is_in_bytes() -> None:
    sync = OffsetSync(TopicPartition("é", 1), 0, 0)  # 2 UTF-8 bytes
    assert sync.key_bytes() == bytes.fromhex("0002 c3a9 00000001")


# ------------------------------------------------------------------------------------- round trip

_names = st.text(max_size=40)
_i64 = st.integers(-(2**63), 2**63 - 1)
_i32 = st.integers(-(2**31), 2**31 - 1)


@given(_names, _i32, _i64, _i64)
def test_offset_sync_round_trip(topic: str, partition: int, up: int, down: int) -> None:
    sync = OffsetSync(TopicPartition(topic, partition), up, down)
    assert OffsetSync.from_record(sync.key_bytes(), sync.value_bytes()) == sync


@given(_names, _names, _i32, _i64, _i64, _names)
def test_checkpoint_round_trip(g: str, t: str, p: int, up: int, down: int, meta: str) -> None:
    cp = Checkpoint(g, TopicPartition(t, p), up, down, meta)
    got = Checkpoint.from_record(memoryview(cp.key_bytes()), bytearray(cp.value_bytes()))
    assert got == cp


@given(_names, _names, _i64)
def test_heartbeat_round_trip(src: str, dst: str, ts: int) -> None:
    hb = Heartbeat(src, dst, ts)
    assert Heartbeat.from_record(hb.key_bytes(), hb.value_bytes()) == hb


def test_records_pickle() -> None:
    items = [
        OffsetSync(TopicPartition("a", 1), 2, 3),
        Checkpoint("g", TopicPartition("a", 1), 2, 3, "m"),
        Heartbeat("x", "y", 5),
    ]
    assert [pickle.loads(pickle.dumps(i)) for i in items] == items


# ------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        (bytes.fromhex("0003 666f"), bytes(16), TruncatedError),  # string cut short
        (bytes.fromhex("0003 666f6f 0000"), bytes(16), TruncatedError),  # partition cut short
        (bytes.fromhex("0003 666f6f 00000000"), bytes(15), TruncatedError),  # value short
        (bytes.fromhex("ffff 00000000"), bytes(16), MalformedRecordError),  # negative length
        (bytes.fromhex("0001 ff 00000000"), bytes(16), MalformedRecordError),  # bad UTF-8
        (bytes.fromhex("0001 61 00000000 00"), bytes(16), MalformedRecordError),  # trailing
        (bytes.fromhex("0001 61 00000000"), bytes(17), MalformedRecordError),  # trailing
        (None, bytes(16), MalformedRecordError),
        (bytes.fromhex("0001 61 00000000"), None, MalformedRecordError),
        (b"", b"", TruncatedError),
    ],
)
def test_offset_sync_bad_bytes(key: bytes | None, value: bytes | None, error: type) -> None:
    with pytest.raises(error):
        OffsetSync.from_record(key, value)


def test_checkpoint_unsupported_version() -> None:
    cp = Checkpoint("g", TopicPartition("t", 0), 1, 2, "")
    value = bytes.fromhex("0001") + cp.value_bytes()[2:]
    with pytest.raises(UnsupportedError, match="version 1"):
        Checkpoint.from_record(cp.key_bytes(), value)


def test_heartbeat_unsupported_version_and_truncation() -> None:
    key = bytes.fromhex("0001 61 0001 62")
    with pytest.raises(UnsupportedError):
        Heartbeat.from_record(key, bytes.fromhex("0002 0000000000000001"))
    with pytest.raises(TruncatedError):
        Heartbeat.from_record(key, bytes.fromhex("0000 00000000"))
    with pytest.raises(TruncatedError):
        Heartbeat.from_record(bytes.fromhex("0001 61"), bytes.fromhex("0000 0000000000000001"))


@given(st.binary(max_size=64), st.binary(max_size=64))
def test_decoders_raise_only_protocol_errors(key: bytes, value: bytes) -> None:
    for cls in (OffsetSync, Checkpoint, Heartbeat):
        with contextlib.suppress(ProtocolError):
            cls.from_record(key, value)


def test_encoder_rejects_invalid_fields() -> None:
    with pytest.raises(ValueError):
        OffsetSync(TopicPartition("t", 0), 2**63, 0)
    with pytest.raises(ValueError):
        OffsetSync(TopicPartition("t", 2**31), 0, 0)
    with pytest.raises(ValueError):
        Heartbeat("x" * 40000, "y", 0)
    with pytest.raises(TypeError):
        Heartbeat("x", "y", 1.5)  # type: ignore[arg-type]
