"""An executor's connection to the driver's lease server reads lines as long as the server accepts
(``open_line_connection``): at 10,000 partitions a lease's START is longer than asyncio's default
64 KiB, and a host that could not read it was replaced again and again."""

from __future__ import annotations

import asyncio

import pytest

from mm2py.runtime.spark.lease_messages import MAX_LINE, StopMsg, decode, encode, open_line_connection

#: longer than asyncio's default line limit, well within MAX_LINE
LONG = "x" * (1024 * 1024)


async def _serve_one_long_line() -> tuple[asyncio.Server, tuple[str, int]]:
    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(encode(StopMsg(LONG)))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, limit=MAX_LINE)
    return server, server.sockets[0].getsockname()[:2]


async def test_a_line_longer_than_asyncios_default_is_read_whole() -> None:
    server, address = await _serve_one_long_line()
    async with server:
        reader, writer = await open_line_connection(address)
        msg = decode(await reader.readline())
        writer.close()
    assert isinstance(msg, StopMsg) and msg.reason == LONG


async def test_asyncios_default_limit_would_refuse_it() -> None:
    """What the executors' connections did before: the line is too long for the default."""
    server, address = await _serve_one_long_line()
    async with server:
        reader, writer = await asyncio.open_connection(*address)
        with pytest.raises(ValueError, match="limit"):
            await reader.readline()
        writer.close()
