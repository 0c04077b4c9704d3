"""Serving the REST API on the worker's own event loop (uvicorn, no signal handling of its own), on
one or more listeners, plain HTTP or HTTPS (:mod:`mm2py.rest_api.security`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

import uvicorn

from mm2py.rest_api.app import create_app, metrics_app
from mm2py.rest_api.security.settings import Listener, RestSettings
from mm2py.rest_api.security.tls import ServerTls, with_client_subject

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from mm2py.rest_api.shared import AnyWorker
    from mm2py.runtime.metrics_page import PartitionTimesPage

log = logging.getLogger("mm2py.rest")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the worker's process owns SIGINT/SIGTERM


def _bind(listener: Listener) -> socket.socket:
    """A socket bound now: a port in use is an OSError for the caller, not a SystemExit in uvicorn."""
    family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((listener.host, listener.port))
    except OSError as exc:
        sock.close()
        where = f"[{listener.host}]" if ":" in listener.host else listener.host
        raise OSError(exc.errno, f"REST API cannot listen on {where}:{listener.port} ({listener.scheme}): "
                                 f"{exc.strerror}") from None
    return sock


class _Served:
    """An ASGI app on the listeners of ``settings`` (bound at once; port 0 picks a free one)."""

    app: Any

    def _listen(self, settings: RestSettings) -> None:
        self.settings = settings
        self.tls = ServerTls(settings.tls) if settings.tls is not None else None
        self._socks: list[socket.socket] = []
        try:
            for listener in settings.listeners:
                self._socks.append(_bind(listener))
        except OSError:
            for sock in self._socks:
                sock.close()
            raise
        #: the listeners as served (a port 0 replaced by the port picked)
        self.listeners = [listener.model_copy(update={"port": sock.getsockname()[1]})
                          for listener, sock in zip(settings.listeners, self._socks, strict=True)]
        self.host, self.port = self.listeners[0].host, self.listeners[0].port

    def _serve_app(self, app: Any) -> None:
        self.app = app
        self._servers = [self._server(listener) for listener in self.listeners]
        self._tasks: list[asyncio.Task[None]] = []

    def _server(self, listener: Listener) -> _Server:
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        config.load()
        if listener.scheme == "https":
            assert self.tls is not None
            config.ssl = self.tls.context
            config.http_protocol_class = with_client_subject(config.http_protocol_class)
        return _Server(config)

    @property
    def url(self) -> str:
        """The first listener's address."""
        return self.listeners[0].url()

    @property
    def urls(self) -> list[str]:
        return [listener.url() for listener in self.listeners]

    async def start(self) -> None:
        if not self.settings.authenticates:
            for listener in self.listeners:
                if not listener.loopback:
                    log.warning("the REST API on %s is reachable beyond this machine with no authentication: "
                                "anyone who reaches it can pause, change and delete flows (see the README's "
                                "'Securing the REST API')", listener.url())
        if (sampler := getattr(self.app.state, "ui_sampler", None)) is not None:
            sampler.start()  # the operator page's figures (GET /ui)
        for server, sock in zip(self._servers, self._socks, strict=True):
            self._tasks.append(asyncio.create_task(server.serve(sockets=[sock])))
        while not all(server.started for server in self._servers):
            for task in self._tasks:
                if task.done():
                    task.result()
                    raise OSError(f"REST API on {', '.join(self.urls)} did not start")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if (sampler := getattr(self.app.state, "ui_sampler", None)) is not None:
            await sampler.stop()
        for server in self._servers:
            server.should_exit = True
        for task in self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
        for sock in self._socks:
            sock.close()


class RestServer(_Served):
    """The API of ``worker`` on ``host:port`` (port 0 picks a free one; see ``.port``), or on the
    listeners of ``settings`` (HTTPS, authentication and roles included) when given."""

    def __init__(self, worker: AnyWorker, host: str = "127.0.0.1", port: int = 8083, *,
                 read_only: bool = False, ui_sample_seconds: float = 5.0,
                 settings: RestSettings | None = None) -> None:
        if settings is None:
            settings = RestSettings(listeners=(Listener(scheme="http", host=host, port=port),),
                                    read_only=read_only)
        self.worker = worker
        self._listen(settings)
        self._serve_app(create_app(worker, read_only=settings.read_only, ui_sample_seconds=ui_sample_seconds,
                                   security=settings))


class MetricsServer(_Served):
    """``--metrics-port`` with ``--metrics-secured``: ``GET /metrics`` on ``host:port`` with the REST
    API's TLS settings (HTTPS when it has an HTTPS listener) and authentication."""

    def __init__(self, registry: CollectorRegistry, times: PartitionTimesPage, settings: RestSettings,
                 host: str, port: int) -> None:
        scheme: Literal["http", "https"] = "https" if settings.tls is not None else "http"
        listener = Listener(scheme=scheme, host=host, port=port)
        self._listen(settings.model_copy(update={"listeners": (listener,)}))
        self._serve_app(metrics_app(registry, times, self.settings))
