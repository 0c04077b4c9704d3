"""One asyncio connection to one broker, with request pipelining.

Requests are framed by :mod:`mm2py.protocol.framing`; many may be in flight and responses are
matched by correlation id. On connect the ApiVersions handshake runs, then the optional
:class:`Authenticator` (SASL, :mod:`mm2py.client.sasl`), so TLS/SASL never touch the codec: TLS is
an ``ssl.SSLContext`` (:mod:`mm2py.client.tls`) handed to ``loop.create_connection``.

Reading is an ``asyncio.BufferedProtocol`` over a :class:`~mm2py.protocol.framing.FrameReader`: the
socket writes a large response (a fetch of megabytes) straight into a buffer of its exact size (no
growing buffer, no slices copied on the way in; batch views point into that buffer).

A broker that announces a SASL session lifetime (KIP-368) gets a re-authentication on the same
connection before it ends, between requests, none in flight dropped (:mod:`mm2py.client.reauth`).

A refused TLS handshake or SASL authentication raises a :class:`SecurityError`. It is deliberately
not a retriable :class:`ClientError`: a wrong CA, certificate or password does not heal by itself,
so callers fail at once with the reason instead of retrying until a time-out.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from mm2py.client.errors import ConnectionLostError, RequestTimeoutError
from mm2py.client.reauth import SessionKeeper
from mm2py.client.request_counts import REQUESTS
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
    FrameReader,
    PendingRequest,
    RequestTracker,
    frame_request,
)
from mm2py.protocol.wire import Buf

log = logging.getLogger(__name__)
T = TypeVar("T")
#: a connection's receive buffer for responses that fit it (larger ones get their own)
_SCRATCH = 256 * 1024


class TlsError(SecurityError):
    """The TLS handshake failed (unknown CA, host name mismatch, client certificate refused...)."""


class AuthenticationError(SecurityError):
    """SASL authentication failed (wrong credentials, mechanism not enabled on the broker...)."""


#: SSL errors that mean "the connection went away", not "TLS refused us"
_SSL_DISCONNECTS = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


def _looks_like_tls(data: bytes | memoryview) -> bool:
    """A TLS record (alert or handshake, version 3.x) where a Kafka frame size should be: no Kafka
    frame is 350 MB or more, so this never mistakes a real response."""
    return len(data) >= 2 and data[0] in (0x15, 0x16) and data[1] == 0x03


class Authenticator(Protocol):
    """Hook run after the ApiVersions handshake (e.g. SASL handshake + authenticate), and again
    before a session lifetime it returns (ms; 0 or None: no limit) ends."""

    async def authenticate(self, conn: BrokerConnection) -> int | None: ...


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
    """Creates connections; override :meth:`open_transport` for custom transports."""

    def __init__(self, config: ConnectionConfig | None = None) -> None:
        self.config = config or ConnectionConfig()

    async def open_transport(
        self, host: str, port: int, protocol: Callable[[], asyncio.BufferedProtocol]
    ) -> asyncio.BaseTransport:
        sec = self.config.security
        transport, _ = await asyncio.get_running_loop().create_connection(
            protocol,
            host,
            port,
            ssl=sec.ssl_context,
            server_hostname=(sec.server_hostname or host) if sec.ssl_context else None,
        )
        return transport

    async def connect(self, host: str, port: int, node_id: int = -1) -> BrokerConnection:
        conn = BrokerConnection(host, port, node_id=node_id, config=self.config, factory=self)
        await conn.connect()
        return conn


class _Wire(asyncio.BufferedProtocol):
    """A connection's socket: bytes received go into its FrameReader's buffers, complete frames
    to the connection; writes wait (:meth:`drain`) while the transport's buffer is full."""

    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.frames = FrameReader(conn.config.max_frame_size, _SCRATCH)
        #: plaintext: the first bytes are checked for a TLS answer (a broker port that wants TLS)
        self._first = conn.config.security.ssl_context is None
        self._buf: memoryview | None = None  # the buffer last handed to the transport
        self._paused = False  # the transport's write buffer is above its high-water mark
        self._drained: asyncio.Future[None] | None = None  # a drain() waiting for resume_writing
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        self._buf = self.frames.buffer()
        return self._buf

    def buffer_updated(self, nbytes: int) -> None:
        if self._first:
            self._first = False
            assert self._buf is not None
            if _looks_like_tls(self._buf[:nbytes]):
                self.conn._fail(self.conn._tls_on_plaintext())
                return
        try:
            frames = self.frames.filled(nbytes)
        except ProtocolError as e:
            self.conn._fail(ConnectionLostError(f"{self.conn}: protocol error: {e}"))
            return
        for frame in frames:
            self.conn._dispatch(frame)

    def eof_received(self) -> bool:
        try:
            self.frames.eof()
            reason = ConnectionLostError(f"{self.conn}: connection closed by broker")
        except ProtocolError as e:  # it closed inside a response
            reason = ConnectionLostError(f"{self.conn}: protocol error: {e}")
        self.conn._fail(reason)
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, ssl.SSLError) and not isinstance(exc, _SSL_DISCONNECTS):
            reason: BaseException = self.conn._tls_error("TLS session", exc)
        elif exc is not None:
            reason = ConnectionLostError(f"{self.conn}: read failed: {exc!r}")
        else:
            reason = ConnectionLostError(f"{self.conn}: connection closed")
        self.conn._fail(reason)
        self._wake_drain()  # request() finds the connection closed
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drain()

    def _wake_drain(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def drain(self) -> None:
        if self._paused and not self.lost.done():
            if self._drained is None or self._drained.done():
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)


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
        self._wire: _Wire | None = None
        self._closed = False
        self._close_reason: BaseException | None = None
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._session: SessionKeeper | None = None

    def __repr__(self) -> str:
        return f"BrokerConnection(node={self.node_id}, {self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._wire is not None and not self._closed

    @property
    def in_flight(self) -> int:
        return len(self._tracker)

    async def connect(self) -> None:
        wire = _Wire(self)
        try:
            opening = self._factory.open_transport(self.host, self.port, lambda: wire)
            await asyncio.wait_for(opening, self.config.connect_timeout_s)
        except ssl.SSLError as e:
            self._closed = True
            if isinstance(e, _SSL_DISCONNECTS):
                raise ConnectionLostError(f"cannot connect to {self.host}:{self.port}: {e!r}") from e
            raise self._tls_error("TLS handshake", e) from e
        except (OSError, TimeoutError) as e:
            self._closed = True
            raise ConnectionLostError(f"cannot connect to {self.host}:{self.port}: {e!r}") from e
        self._wire = wire
        try:
            await self._handshake()
            authenticator = self.config.security.authenticator
            if authenticator is not None:
                since = asyncio.get_running_loop().time()
                lifetime = await authenticator.authenticate(self)
                self._session = SessionKeeper(repr(self), self.config.security.name,
                                              lambda: authenticator.authenticate(self), self._fail)
                self._session.started(lifetime, since)
        except BaseException:
            await self.close()
            raise

    def _tls_on_plaintext(self) -> TlsError:
        name = self.config.security.name
        return TlsError(f"{self}{f' of cluster {name!r}' if name else ''}: the broker answers "
                        "with TLS on this port, but the client connects without TLS "
                        "(PLAINTEXT / SASL_PLAINTEXT)")

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
        if self._session is not None:
            await self._session.wait()  # a re-authentication under way: after it
        wire = self._wire
        if self._closed or wire is None or wire.transport is None:
            raise ConnectionLostError(f"{self} is closed: {self._close_reason!r}")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        pending = self._tracker.register(api_key, api_version, parser, fut)
        parts = frame_request(api_key, api_version, pending.correlation_id, self.config.client_id, body)
        REQUESTS.add(self.config.security.name, api_key)
        try:
            wire.transport.writelines(parts)
            await wire.drain()
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

    def _dispatch(self, frame: bytes | bytearray) -> None:
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

    def _fail(self, reason: BaseException, *, by_client: bool = False) -> None:
        if self._close_reason is None:
            self._close_reason = reason
        if self._session is not None and not self._closed:
            self._session.lost(by_client=by_client)
        self._closed = True
        for p in self._tracker.drain():
            self._fail_pending(p, reason)
        if self._wire is not None and self._wire.transport is not None:
            self._wire.transport.close()

    @staticmethod
    def _fail_pending(p: PendingRequest[asyncio.Future[Any]], reason: BaseException) -> None:
        if p.context is not None and not p.context.done():
            p.context.set_exception(reason)

    async def close(self) -> None:
        """Close the socket; in-flight requests fail with ConnectionLostError."""
        self._fail(ConnectionLostError(f"{self}: closed by client"), by_client=True)
        if self._wire is not None and self._wire.transport is not None:
            await self._wire.lost  # set by connection_lost, never failed
