"""A TCP proxy in front of a real broker that can cut a client off with its requests delivered.

It stands for a network fault the producer must survive: the connection to the broker fails while
requests are in flight, after the broker has read (and appended) them, so their answers never
come. Armed with :meth:`CutProxy.cut_after`, the proxy passes the client's next ``n`` Produce
requests to the broker, drops the broker's answers from then on, waits until the broker has
answered all of them (so each was handled), and then closes the client's side. Later connections
are passed through untouched. Used with :class:`ProxiedFactory`, which makes a raw client reach
the broker through the proxy whatever address the metadata advertises.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct

from mm2py.client.connection import BrokerConnection, ConnectionFactory
from mm2py.protocol.api import ApiKey


class CutProxy:
    def __init__(self, broker_host: str, broker_port: int) -> None:
        self.broker = (broker_host, broker_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._cut_after: int | None = None
        self._skip = 0  # Produce requests still to pass before the cut is armed
        self.cuts = 0  # connections cut
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cut_after(self, produce_requests: int, skip: int = 0) -> None:
        """After ``skip`` more Produce requests have passed, the next connection to carry
        ``produce_requests`` more is cut as described above."""
        self._skip, self._cut_after = skip, produce_requests

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        with contextlib.suppress(asyncio.CancelledError):  # closed with the connection open
            await self._relay(client_r, client_w)
        self._tasks.discard(task)

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        broker_r, broker_w = await asyncio.open_connection(*self.broker)
        held: set[int] = set()  # correlation ids of the cut-off Produce requests not yet answered
        limit: int | None = None  # this connection is the armed one: cut after this many requests
        sent = 0
        all_answered = asyncio.Event()

        async def upstream() -> None:
            nonlocal limit, sent
            while True:
                frame = await _frame(client_r)
                if frame is None:
                    broker_w.close()
                    return
                api_key, correlation = struct.unpack_from(">h2xi", frame, 4)
                if limit is None and self._cut_after is not None and api_key == ApiKey.PRODUCE:
                    if self._skip > 0:
                        self._skip -= 1
                    else:
                        limit, self._cut_after = self._cut_after, None
                if limit is not None and api_key == ApiKey.PRODUCE:
                    held.add(correlation)
                    sent += 1
                broker_w.write(frame)
                await broker_w.drain()
                if limit is not None and sent >= limit:
                    return  # read no more from the client: anything it writes later is lost

        async def downstream() -> None:
            while True:
                frame = await _frame(broker_r)
                if frame is None:
                    return
                (correlation,) = struct.unpack_from(">i", frame, 4)
                if correlation in held:
                    held.discard(correlation)  # handled by the broker, never answered to the client
                    if limit is not None and sent >= limit and not held:
                        all_answered.set()
                    continue
                client_w.write(frame)
                await client_w.drain()

        up, down = asyncio.create_task(upstream()), asyncio.create_task(downstream())
        cut = asyncio.create_task(all_answered.wait())
        try:
            await asyncio.wait({up, down, cut}, return_when=asyncio.FIRST_COMPLETED)
            if limit is not None and sent >= limit:
                await asyncio.wait_for(cut, 30)  # every cut-off request was handled
                self.cuts += 1
        finally:
            for t in (up, down, cut):
                t.cancel()
            for w in (client_w, broker_w):
                w.close()


class ProxiedFactory(ConnectionFactory):
    """Connects to the proxy instead of the broker the metadata names."""

    def __init__(self, proxy: CutProxy) -> None:
        super().__init__()
        self.proxy = proxy

    async def connect(self, host: str, port: int, node_id: int = -1) -> BrokerConnection:
        return await super().connect("127.0.0.1", self.proxy.port, node_id)


async def _frame(reader: asyncio.StreamReader) -> bytes | None:
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        head = await reader.readexactly(4)
        (size,) = struct.unpack(">i", head)
        return head + await reader.readexactly(size)
    return None

