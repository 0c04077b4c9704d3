"""Serving the REST API on the worker's own event loop (uvicorn, no signal handling of its own)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING

import uvicorn

from mm2py.rest_api.app import create_app

if TYPE_CHECKING:
    from mm2py.rest_api.shared import AnyWorker


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the worker's process owns SIGINT/SIGTERM


class RestServer:
    """The API of ``worker`` on ``host:port`` (port 0 picks a free one; see ``.port``)."""

    def __init__(self, worker: AnyWorker, host: str = "127.0.0.1", port: int = 8083, *,
                 read_only: bool = False, ui_sample_seconds: float = 5.0) -> None:
        # bind now: a port in use is an OSError for the caller, not a SystemExit inside uvicorn
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise OSError(exc.errno, f"REST API cannot listen on {host}:{port}: {exc.strerror}") from None
        self.host = host
        self.port = self._sock.getsockname()[1]
        self.app = create_app(worker, read_only=read_only, ui_sample_seconds=ui_sample_seconds)
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self.app.state.ui_sampler.start()  # the operator page's figures (GET /ui)
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise OSError(f"REST API on {self.url} did not start")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        await self.app.state.ui_sampler.stop()
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 10)
        self._sock.close()
