"""A TCP proxy that adds a fixed round-trip latency: a WAN link on loopback, without netem.

Every chunk read from one side is written to the other side ``delay / 2`` after it was read, in
order, in both directions, so a request/response exchange through the proxy takes ``--delay-ms``
longer than a direct one. No bandwidth limit: reads are large (``--read-kib``) and each direction
buffers up to ``--max-buffer-mib`` in flight before it stops reading (a generous window, far above
the bandwidth-delay product of a loopback link at tens of milliseconds). A half-close (EOF) is
delivered after the same delay as the data before it; the connection is torn down once both
directions are closed, or at once if either side fails. Used by ``mirror_bench.py --rtt-ms``::

    python benchmarks/latency_proxy.py --listen 127.0.0.1:19092 --to 127.0.0.1:9092 --delay-ms 40
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import signal
import sys
import time


def host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


class Pipe:
    """One direction of a connection: read chunks, deliver each ``delay`` seconds after reading it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float,
                 read_size: int, max_buffer: int) -> None:
        self.reader, self.writer, self.delay = reader, writer, delay
        self.read_size, self.max_buffer = read_size, max_buffer
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()  # b"" marks EOF
        self.buffered = 0
        self.changed = asyncio.Event()

    async def read_side(self) -> None:
        while True:
            while self.buffered >= self.max_buffer:  # back-pressure: the far end is not keeping up
                self.changed.clear()
                await self.changed.wait()
            chunk = await self.reader.read(self.read_size)
            self.queue.append((time.monotonic() + self.delay, chunk))
            self.buffered += len(chunk)
            self.changed.set()
            if not chunk:
                return

    async def write_side(self) -> None:
        while True:
            while not self.queue:
                self.changed.clear()
                await self.changed.wait()
            due, chunk = self.queue[0]
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self.queue.popleft()
            if not chunk:
                if self.writer.can_write_eof():
                    self.writer.write_eof()
                return
            self.writer.write(chunk)
            await self.writer.drain()
            self.buffered -= len(chunk)
            self.changed.set()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:  # one side failing cancels the other
            group.create_task(self.read_side())
            group.create_task(self.write_side())


class LatencyProxy:
    def __init__(self, target: tuple[str, int], delay: float, read_size: int, max_buffer: int) -> None:
        self.target, self.delay = target, delay
        self.read_size, self.max_buffer = read_size, max_buffer
        self.connections = 0

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection(*self.target, limit=self.read_size)
        except OSError:
            client_w.close()
            return
        pipes = [Pipe(client_r, server_w, self.delay, self.read_size, self.max_buffer),
                 Pipe(server_r, client_w, self.delay, self.read_size, self.max_buffer)]
        tasks = [asyncio.ensure_future(p.run()) for p in pipes]
        try:
            # both directions ended cleanly (EOF each way), or one failed: then drop the connection
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for t in done:
                t.exception()  # retrieved: a reset connection is normal teardown, not an error
        except asyncio.CancelledError:
            pass  # the proxy is shutting down with this connection open
        finally:
            for t in tasks:
                t.cancel()
            for w in (client_w, server_w):
                w.close()
            for w in (client_w, server_w):
                with contextlib.suppress(OSError, asyncio.CancelledError):
                    await w.wait_closed()


async def serve(args: argparse.Namespace) -> None:
    proxy = LatencyProxy(host_port(args.to), args.delay_ms / 2000.0, args.read_kib * 1024,
                         args.max_buffer_mib << 20)
    host, port = host_port(args.listen)
    server = await asyncio.start_server(proxy.handle, host, port, limit=args.read_kib * 1024,
                                        reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"latency proxy {args.listen} -> {args.to}, +{args.delay_ms:g} ms round trip", flush=True)
    async with server:
        await stop.wait()
    print(f"latency proxy stopped after {proxy.connections} connections", flush=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True, help="HOST:PORT to accept connections on")
    ap.add_argument("--to", required=True, help="HOST:PORT to forward them to")
    ap.add_argument("--delay-ms", type=float, required=True, help="added round-trip time (half each way)")
    ap.add_argument("--read-kib", type=int, default=1024, help="largest chunk read at once")
    ap.add_argument("--max-buffer-mib", type=int, default=64, help="bytes in flight per direction")
    asyncio.run(serve(ap.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
