"""One asyncio connection to one broker, with request pipelining.

Requests are framed by :mod:`mm2py.protocol.framing`; many may be in flight and responses are
matched by correlation id. On connect the ApiVersions handshake runs, then the optional
:class:`Authenticator` (SASL, :mod:`mm2py.client.sasl`), so TLS/SASL never touch the codec: TLS is
an ``ssl.SSLContext`` (:mod:`mm2py.client.tls`) handed to ``asyncio.open_connection``.

A refused TLS handshake or SASL authentication raises a :class:`SecurityError`. It is deliberately
not a retriable :class:`ClientError`: a wrong CA, certificate or password does not heal by itself,
so callers fail at once with the reason instead of retrying until a time-out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from mm2py.client.errors import ConnectionLostError, RequestTimeoutError
from mm2py.errors import SecurityError
from mm2py.protocol.api import (
    SUPPORTED_VERSIONS,
    ApiKey,
    decode_api_versions_response,
    encode_api_versions_request,
    pick_version,
)
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.errors_codes import UNSUPPORTED_VERSION, BrokerError
from mm2py.protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    PendingRequest,
    RequestTracker,
    frame_request,
)
from mm2py.protocol.wire import Buf

log = logging.getLogger(__name__)
T = TypeVar("T")
_READ_CHUNK = 256 * 1024


class TlsError(SecurityError):
    """The TLS handshake failed (unknown CA, host name mismatch, client certificate refused...)."""


class AuthenticationError(SecurityError):
    """SASL authentication failed (wrong credentials, mechanism not enabled on the broker...)."""


#: SSL errors that mean "the connection went away", not "TLS refused us"
_SSL_DISCONNECTS = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


def _looks_like_tls(data: bytes) -> bool:
    """A TLS record (alert or handshake, version 3.x) where a Kafka frame size should be: no Kafka
    frame is 350 MB or more, so this never mistakes a real response."""
    return len(data) >= 2 and data[0] in (0x15, 0x16) and data[1] == 0x03


class Authenticator(Protocol):
    """Hook run after the ApiVersions handshake (e.g. SASL handshake + authenticate)."""

    async def authenticate(self, conn: BrokerConnection) -> None: ...


@dataclass(frozen=True)
class SecurityConfig:
    """PLAINTEXT by default; SSL = ``ssl_context``; SASL_* = ``authenticator`` (+ context)."""

    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    authenticator: Authenticator | None = None
    #: what to call the cluster in error messages (e.g. its MM2 alias)
    name: str = ""

    @property
    def protocol(self) -> str:
        tls = self.ssl_context is not None
        if self.authenticator is None:
            return "SSL" if tls else "PLAINTEXT"
        return "SASL_SSL" if tls else "SASL_PLAINTEXT"


@dataclass(frozen=True)
class ConnectionConfig:
    client_id: str = "mm2py"
    request_timeout_s: float = 30.0
    connect_timeout_s: float = 10.0
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    security: SecurityConfig = field(default_factory=SecurityConfig)


class ConnectionFactory:
    """Creates connections; override :meth:`open_streams` for custom transports."""

    def __init__(self, config: ConnectionConfig | None = None) -> None:
        self.config = config or ConnectionConfig()

    async def open_streams(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sec = self.config.security
        return await asyncio.open_connection(
            host,
            port,
            ssl=sec.ssl_context,
            server_hostname=(sec.server_hostname or host) if sec.ssl_context else None,
            limit=_READ_CHUNK,
        )

    async def connect(self, host: str, port: int, node_id: int = -1) -> BrokerConnection:
        conn = BrokerConnection(host, port, node_id=node_id, config=self.config, factory=self)
        await conn.connect()
        return conn


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        config: ConnectionConfig | None = None,
        factory: ConnectionFactory | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.config = config or ConnectionConfig()
        self._factory = factory or ConnectionFactory(self.config)
        self._tracker: RequestTracker[asyncio.Future[Any]] = RequestTracker()
        self._decoder = FrameDecoder(self.config.max_frame_size)
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._closed = False
        self._close_reason: BaseException | None = None
        self.api_versions: dict[int, tuple[int, int]] = {}

    def __repr__(self) -> str:
        return f"BrokerConnection(node={self.node_id}, {self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._closed

    @property
    def in_flight(self) -> int:
        return len(self._tracker)

    async def connect(self) -> None:
        try:
            reader, writer = await asyncio.wait_for(
                self._factory.open_streams(self.host, self.port), self.config.connect_timeout_s
            )
        except ssl.SSLError as e:
            self._closed = True
            if isinstance(e, _SSL_DISCONNECTS):
                raise ConnectionLostError(f"cannot connect to {self.host}:{self.port}: {e!r}") from e
            raise self._tls_error("TLS handshake", e) from e
        except (OSError, TimeoutError) as e:
            self._closed = True
            raise ConnectionLostError(f"cannot connect to {self.host}:{self.port}: {e!r}") from e
        self._writer = writer
        self._reader_task = asyncio.create_task(self._read_loop(reader), name=f"kafka-read-{self}")
        try:
            await self._handshake()
            if self.config.security.authenticator is not None:
                await self.config.security.authenticator.authenticate(self)
        except BaseException:
            await self.close()
            raise

    def _tls_error(self, what: str, e: ssl.SSLError) -> TlsError:
        name = self.config.security.name
        where = f"cluster '{name}' " if name else ""
        reason = getattr(e, "verify_message", None) or e.reason or str(e)
        return TlsError(f"{what} with {where}broker {self.host}:{self.port} failed: {reason} ({e})")

    async def _handshake(self) -> None:
        version = SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][1]
        resp = await self.request(
            ApiKey.API_VERSIONS,
            version,
            encode_api_versions_request(version, "mm2py"),
            decode_api_versions_response,
        )
        if resp.error_code == UNSUPPORTED_VERSION and ApiKey.API_VERSIONS in resp.api_versions:
            version = pick_version(ApiKey.API_VERSIONS, resp.api_versions)
            resp = await self.request(
                ApiKey.API_VERSIONS,
                version,
                encode_api_versions_request(version, "mm2py"),
                decode_api_versions_response,
            )
        if resp.error_code:
            raise BrokerError(resp.error_code, "ApiVersions handshake")
        self.api_versions = resp.api_versions

    def version_for(self, api_key: int, max_version: int | None = None) -> int:
        return pick_version(api_key, self.api_versions, max_version=max_version)

    async def request(
        self,
        api_key: int,
        api_version: int,
        body: Buf,
        parser: Callable[[memoryview, int], T],
        timeout: float | None = None,
    ) -> T:
        """Send one request and await its parsed response."""
        if self._closed or self._writer is None:
            raise ConnectionLostError(f"{self} is closed: {self._close_reason!r}")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        pending = self._tracker.register(api_key, api_version, parser, fut)
        parts = frame_request(api_key, api_version, pending.correlation_id, self.config.client_id, body)
        try:
            self._writer.writelines(parts)
            await self._writer.drain()
        except (OSError, RuntimeError) as e:
            self._fail(ConnectionLostError(f"{self}: write failed: {e!r}"))
        timeout = self.config.request_timeout_s if timeout is None else timeout
        try:
            result: T = await asyncio.wait_for(fut, timeout)
            return result
        except TimeoutError:
            self._tracker.abandon(pending.correlation_id)
            raise RequestTimeoutError(
                f"{self}: api {api_key} v{api_version} timed out after {timeout}s"
            ) from None
        except asyncio.CancelledError:
            self._tracker.abandon(pending.correlation_id)
            raise

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        reason: BaseException
        first = True
        try:
            while True:
                data = await reader.read(_READ_CHUNK)
                if not data:
                    self._decoder.feed_eof()
                    reason = ConnectionLostError(f"{self}: connection closed by broker")
                    break
                if first and self.config.security.ssl_context is None and _looks_like_tls(data):
                    name = self.config.security.name
                    reason = TlsError(f"{self}{f' of cluster {name!r}' if name else ''}: the broker answers "
                                      "with TLS on this port, but the client connects without TLS "
                                      "(PLAINTEXT / SASL_PLAINTEXT)")
                    break
                first = False
                for frame in self._decoder.feed(data):
                    self._dispatch(frame)
        except ProtocolError as e:
            reason = ConnectionLostError(f"{self}: protocol error: {e}")
        except ssl.SSLError as e:  # e.g. the broker's alert refusing our client certificate
            reason = (ConnectionLostError(f"{self}: read failed: {e!r}") if isinstance(e, _SSL_DISCONNECTS)
                      else self._tls_error("TLS session", e))
        except (OSError, asyncio.IncompleteReadError) as e:
            reason = ConnectionLostError(f"{self}: read failed: {e!r}")
        except asyncio.CancelledError:
            reason = ConnectionLostError(f"{self}: closed")
            self._fail(reason)
            raise
        self._fail(reason)

    def _dispatch(self, frame: bytes) -> None:
        matched = self._tracker.match(frame)
        if matched is None:
            return  # late answer to an abandoned request
        pending, body = matched
        fut = pending.context
        if fut is None or fut.done():
            return
        try:
            assert pending.parser is not None
            fut.set_result(pending.parser(body, pending.api_version))
        except Exception as e:  # a parser failure fails that request, not the connection
            fut.set_exception(e)

    def _fail(self, reason: BaseException) -> None:
        if self._close_reason is None:
            self._close_reason = reason
        self._closed = True
        for p in self._tracker.drain():
            self._fail_pending(p, reason)
        if self._writer is not None:
            self._writer.close()

    @staticmethod
    def _fail_pending(p: PendingRequest[asyncio.Future[Any]], reason: BaseException) -> None:
        if p.context is not None and not p.context.done():
            p.context.set_exception(reason)

    async def close(self) -> None:
        """Close the socket; in-flight requests fail with ConnectionLostError."""
        if self._reader_task is not None and not self._reader_task.done():
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
        self._fail(ConnectionLostError(f"{self}: closed by client"))
        if self._writer is not None:
            with contextlib.suppress(OSError, ConnectionError):
                await self._writer.wait_closed()
