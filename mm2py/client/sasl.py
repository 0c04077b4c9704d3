"""SASL authentication of a broker connection: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.

:class:`SaslAuthenticator` is the :class:`~mm2py.client.connection.Authenticator` a connection runs
after its ApiVersions handshake: SaslHandshake v1 names the mechanism, then SaslAuthenticate carries
the mechanism's messages (:mod:`mm2py.protocol.sasl_mechanisms`). Any refusal — the broker does not
enable the mechanism, the credentials are wrong, a SCRAM server fails its own proof — raises
:class:`~mm2py.client.connection.AuthenticationError` with the broker's message; it is never retried.
"""

from __future__ import annotations

import logging

from mm2py.client.connection import AuthenticationError, BrokerConnection
from mm2py.protocol.api import pick_version
from mm2py.protocol.api_sasl import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SASL_VERSIONS,
    SaslAuthenticateResponse,
    decode_sasl_authenticate_response,
    decode_sasl_handshake_response,
    encode_sasl_authenticate_request,
    encode_sasl_handshake_request,
)
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.errors_codes import error_name
from mm2py.protocol.sasl_mechanisms import MECHANISMS, PLAIN, ScramClient, plain_message

log = logging.getLogger(__name__)


class SaslAuthenticator:
    """Authenticates each new connection as ``username`` with ``mechanism``."""

    def __init__(self, mechanism: str, username: str, password: str, *, cluster: str = "") -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"unsupported SASL mechanism {mechanism!r} (supported: {', '.join(MECHANISMS)})")
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self.cluster = cluster

    def __repr__(self) -> str:  # never shows the password
        return f"SaslAuthenticator({self.mechanism}, user={self.username!r}, cluster={self.cluster!r})"

    def _error(self, conn: BrokerConnection, reason: str) -> AuthenticationError:
        where = f"cluster '{self.cluster}' (broker {conn.host}:{conn.port})" if self.cluster else (
            f"broker {conn.host}:{conn.port}")
        return AuthenticationError(
            f"SASL {self.mechanism} authentication of user '{self.username}' to {where} failed: {reason}"
        )

    async def authenticate(self, conn: BrokerConnection) -> None:
        try:
            await self._handshake(conn)
            version = pick_version(SASL_AUTHENTICATE, conn.api_versions, SASL_VERSIONS)
            if self.mechanism == PLAIN:
                await self._round(conn, version, plain_message(self.username, self._password))
                return
            scram = ScramClient(self.mechanism, self.username, self._password)
            server_first = await self._round(conn, version, scram.first_message())
            client_final = scram.final_message(server_first.auth_bytes)
            server_final = await self._round(conn, version, client_final)
            scram.verify_server_final(server_final.auth_bytes)
        except ProtocolError as e:  # malformed SCRAM messages, no common API version
            raise self._error(conn, str(e)) from e

    async def _handshake(self, conn: BrokerConnection) -> None:
        version = pick_version(SASL_HANDSHAKE, conn.api_versions, SASL_VERSIONS)
        resp = await conn.request(
            SASL_HANDSHAKE, version, encode_sasl_handshake_request(version, self.mechanism),
            decode_sasl_handshake_response,
        )
        if resp.error_code:
            enabled = ", ".join(resp.mechanisms) or "none"
            raise self._error(
                conn, f"{error_name(resp.error_code)} (mechanisms the broker enables here: {enabled})"
            )

    async def _round(self, conn: BrokerConnection, version: int, payload: bytes) -> SaslAuthenticateResponse:
        resp = await conn.request(
            SASL_AUTHENTICATE, version, encode_sasl_authenticate_request(version, payload),
            decode_sasl_authenticate_response,
        )
        if resp.error_code:
            detail = f": {resp.error_message}" if resp.error_message else ""
            raise self._error(conn, f"{error_name(resp.error_code)}{detail}")
        if resp.session_lifetime_ms > 0:
            log.debug("%s: broker session lifetime %d ms (the broker closes the connection then; "
                      "mm2py reconnects)", conn, resp.session_lifetime_ms)
        return resp
