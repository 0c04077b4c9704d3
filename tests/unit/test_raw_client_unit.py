"""Client pieces without brokers: fetch-response processing, produce preparation, and
BrokerConnection against an in-process fake broker (pipelining, timeouts, connection loss)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from mm2py.client.connection import BrokerConnection, ConnectionConfig
from mm2py.client.errors import ConnectionLostError, RequestTimeoutError
from mm2py.client.fetcher import FetchedPartition, WaitingPartitions, process_partition
from mm2py.client.producer import plain_produce_bytes
from mm2py.protocol.api import (
    ApiKey,
    FetchPartitionResponse,
    decode_init_producer_id_response,
    encode_init_producer_id_request,
)
from mm2py.protocol.api_fetch import AbortedTransaction
from mm2py.protocol.compression import Codec
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.errors_codes import OFFSET_OUT_OF_RANGE
from mm2py.protocol.framing import FrameReader, decode_request_header, encode_frame, encode_response_header
from mm2py.protocol.record_codec import Record, build_batch, decode_records
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from mm2py.protocol.wire import Writer

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path

TP = TopicPartition("t", 0)
TS = 1_700_000_000_000


def data_batch(base: int, n: int, *, pid: int = -1, txn: bool = False, codec: Codec = Codec.NONE) -> bytes:
    recs = [Record(i, i, b"k%d" % (base + i), b"v%d" % (base + i)) for i in range(n)]
    return build_batch(recs, base_offset=base, base_timestamp=TS + base, producer_id=pid,
                       producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                       transactional=txn, codec=codec)  # fmt: skip


def control_batch(base: int, pid: int, commit: bool) -> bytes:
    key = b"\x00\x00\x00" + (b"\x01" if commit else b"\x00")
    return build_batch([Record(0, 0, key, b"\x00\x00\x00\x00\x00\x00")], base_offset=base,
                       base_timestamp=TS, producer_id=pid, producer_epoch=0, transactional=True,
                       control=True)  # fmt: skip


def response(
    records: bytes, aborted: tuple[AbortedTransaction, ...] | None = None, error: int = 0
) -> FetchPartitionResponse:
    return FetchPartitionResponse("t", None, 0, error, 100, 90, 0, aborted, -1, memoryview(records))


def record_set() -> tuple[bytes, int]:
    full = b"".join([
        data_batch(0, 5, codec=Codec.LZ4),  # 0-4, fetched from offset 1: cropped
        data_batch(5, 2, pid=7, txn=True),  # 5-6 aborted
        control_batch(7, 7, commit=False),  # 7 ABORT marker
        data_batch(8, 2, pid=8, txn=True),  # 8-9 committed
        control_batch(10, 8, commit=True),  # 10 COMMIT marker
        data_batch(11, 2),  # 11-12 plain
    ])  # fmt: skip
    tail = data_batch(13, 3)
    return full + tail[: len(tail) // 2], len(tail) // 2


def values(batches: list[RecordBatch]) -> list[bytes | None]:
    return [r.value for b in batches for r in decode_records(b)]


def test_process_partition_read_committed() -> None:
    data, tail = record_set()
    out = process_partition(TP, 1, response(data, (AbortedTransaction(7, 5),)), read_committed=True)
    assert out.ok
    assert values(out.batches) == [b"v1", b"v2", b"v3", b"v4", b"v8", b"v9", b"v11", b"v12"]
    assert out.batches[0].base_offset == 1 and out.batches[0].codec == Codec.LZ4
    assert not any(b.is_control for b in out.batches)
    assert out.next_offset == 13  # past the last complete batch; truncated tail dropped
    assert out.truncated_bytes == tail
    assert (out.high_watermark, out.last_stable_offset) == (100, 90)


def test_process_partition_read_uncommitted_keeps_aborted_data_but_no_markers() -> None:
    data, _ = record_set()
    out = process_partition(TP, 0, response(data, None), read_committed=False)
    assert values(out.batches) == [b"v%d" % i for i in (0, 1, 2, 3, 4, 5, 6, 8, 9, 11, 12)]


def test_process_partition_skips_batches_before_offset_and_reports_errors() -> None:
    data, _ = record_set()
    out = process_partition(TP, 11, response(data, ()), read_committed=True)
    assert values(out.batches) == [b"v11", b"v12"]
    err = process_partition(TP, 500, response(b"", None, OFFSET_OUT_OF_RANGE), read_committed=True)
    assert err.error_code == OFFSET_OUT_OF_RANGE and err.error_name == "OFFSET_OUT_OF_RANGE"
    assert err.batches == [] and err.next_offset == 500


def test_process_partition_stalled_when_only_a_partial_batch() -> None:
    big = data_batch(0, 10)
    out = process_partition(TP, 0, response(big[:40]), read_committed=True)
    assert out.stalled and out.next_offset == 0
    assert not process_partition(TP, 0, response(b""), read_committed=True).stalled


def test_process_partition_starved_when_nothing_returned_below_the_end() -> None:
    # response(): high watermark 100, last stable offset 90
    assert process_partition(TP, 0, response(b""), read_committed=True).starved
    assert process_partition(TP, 95, response(b""), read_committed=False).starved
    # at the end (the LSO under read_committed): nothing to return, not starved
    assert not process_partition(TP, 95, response(b""), read_committed=True).starved
    assert not process_partition(TP, 100, response(b""), read_committed=False).starved
    # data returned, a partial batch (stalled instead), an error: not starved
    assert not process_partition(TP, 0, response(data_batch(0, 3)), read_committed=True).starved
    partial = process_partition(TP, 0, response(data_batch(0, 10)[:40]), read_committed=True)
    assert partial.stalled and not partial.starved
    assert not process_partition(TP, 0, response(b"", None, OFFSET_OUT_OF_RANGE), read_committed=True).starved


def test_waiting_partitions_take_turns_when_the_broker_serves_only_the_first() -> None:
    """Like a tiered-storage broker: one remote partition per request, the others get nothing,
    while a local partition (l) first in the caller's order always has data."""
    local, remote = TopicPartition("l", 0), [TopicPartition("r", p) for p in range(3)]
    waiting = WaitingPartitions()
    served: list[TopicPartition] = []
    for _ in range(9):
        order = waiting.order([local, *remote])
        first_remote = next(tp for tp in order if tp in remote)
        served.append(first_remote)
        for tp in order:
            got = tp in (local, first_remote)
            waiting.note(FetchedPartition(tp, 0, next_offset=1 if got else 0, starved=not got))
    assert served[:3] == remote and served[3:6] == remote and served[6:] == remote
    assert waiting.order([local, remote[0]]) == [remote[0], local]  # waited one round, goes first


def test_process_partition_never_returns_corrupt_batch() -> None:
    good = bytearray(data_batch(0, 3) + data_batch(3, 3))
    good[-1] ^= 0xFF  # corrupt the second batch's last record byte
    with pytest.raises(CorruptBatchError):
        process_partition(TP, 0, response(bytes(good)), read_committed=True)


def test_plain_produce_bytes_rules() -> None:
    with pytest.raises(ValueError):
        plain_produce_bytes(control_batch(0, 5, commit=True))
    stripped = RecordBatch(plain_produce_bytes(data_batch(42, 3, pid=9, txn=True, codec=Codec.ZSTD)))
    assert (stripped.base_offset, stripped.producer_id, stripped.base_sequence) == (0, -1, -1)
    assert not stripped.is_transactional and stripped.crc_ok() and stripped.codec == Codec.ZSTD
    gapped = build_batch(
        [Record(0, 0, None, b"a"), Record(3, 1, None, b"b")], base_timestamp=TS, base_offset=7
    )
    fixed = RecordBatch(plain_produce_bytes(gapped))
    assert fixed.is_contiguous() and fixed.base_offset == 0 and values([fixed]) == [b"a", b"b"]
    clean = data_batch(0, 2)
    assert plain_produce_bytes(clean) == clean
    bad = bytearray(clean)
    bad[-1] ^= 1
    with pytest.raises(CorruptBatchError):
        plain_produce_bytes(bytes(bad))


# ------------------------------------------------------------------------------- fake broker


def api_versions_body() -> bytes:
    w = Writer()
    w.int16(0)
    w.array_len(2, True)
    for key, hi in ((ApiKey.API_VERSIONS, 3), (ApiKey.INIT_PRODUCER_ID, 5)):
        w.int16(key)
        w.int16(0)
        w.int16(hi)
        w.tagged_fields()
    w.int32(0)
    w.tagged_fields()
    return w.getvalue()


class FakeBroker:
    """Answers ApiVersions; answers InitProducerId with producer_id = correlation id, holding
    answers until ``release`` pairs are collected (then replies in reverse order); requests with
    transaction timeout 0 are never answered; timeout -2 closes the socket."""

    def __init__(self, release: int = 1) -> None:
        self.release = release
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        dec = FrameReader()
        held: list[bytes] = []
        while data := await reader.read(65536):
            for frame in dec.feed(data):
                header, off = decode_request_header(frame)
                cid = header.correlation_id
                if header.api_key == ApiKey.API_VERSIONS:
                    writer.write(encode_frame(encode_response_header(cid, 0) + api_versions_body()))
                    continue
                timeout_ms = int.from_bytes(frame[off + 1 : off + 5], "big", signed=True)
                if timeout_ms == 0:
                    continue
                if timeout_ms == -2:
                    writer.close()
                    return
                w = Writer()
                w.int32(0)
                w.int16(0)
                w.int64(cid)
                w.int16(1)
                w.tagged_fields()
                held.append(encode_frame(encode_response_header(cid, 1) + w.getvalue()))
                if len(held) >= self.release:
                    for f in reversed(held):
                        writer.write(f)
                    held.clear()
            await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def fake_broker(release: int = 1) -> AsyncIterator[BrokerConnection]:
    fb = FakeBroker(release)
    server = await asyncio.start_server(fb.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = BrokerConnection("127.0.0.1", port, config=ConnectionConfig(request_timeout_s=0.5))
    await conn.connect()
    try:
        yield conn
    finally:
        await conn.close()
        server.close()
        for w in fb.writers:
            w.close()
            with contextlib.suppress(OSError, ConnectionError):
                await w.wait_closed()
        await server.wait_closed()


async def init_pid(conn: BrokerConnection, timeout_ms: int) -> int:
    body = encode_init_producer_id_request(2, None, timeout_ms)
    resp = await conn.request(ApiKey.INIT_PRODUCER_ID, 2, body, decode_init_producer_id_response)
    return resp.producer_id


async def test_handshake_and_pipelining_out_of_order() -> None:
    async with fake_broker(release=20) as conn:
        assert conn.api_versions[ApiKey.INIT_PRODUCER_ID] == (0, 5)
        assert conn.version_for(ApiKey.INIT_PRODUCER_ID) == 5
        got = await asyncio.gather(*(init_pid(conn, 1000) for _ in range(20)))
        # correlation ids 1..20 (0 was ApiVersions); answers came back reversed, matched by id
        assert got == list(range(1, 21))


async def test_timeout_keeps_connection_usable() -> None:
    async with fake_broker() as conn:
        with pytest.raises(RequestTimeoutError):
            await init_pid(conn, 0)
        assert conn.connected and conn.in_flight == 0
        assert await init_pid(conn, 1000) == 2


async def test_connection_loss_fails_in_flight_requests() -> None:
    async with fake_broker(release=99) as conn:
        pending = [asyncio.create_task(init_pid(conn, 1000)) for _ in range(3)]
        await asyncio.sleep(0.05)
        assert conn.in_flight == 3
        with pytest.raises(ConnectionLostError):
            await init_pid(conn, -2)
        for t in pending:
            with pytest.raises(ConnectionLostError):
                await t
        with pytest.raises(ConnectionLostError):
            await init_pid(conn, 1000)
