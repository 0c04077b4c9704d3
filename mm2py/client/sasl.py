"""SASL authentication of a broker connection: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.

:class:`SaslAuthenticator` is the :class:`~mm2py.client.connection.Authenticator` a connection runs
after its ApiVersions handshake, and again to re-authenticate (KIP-368): SaslHandshake v1 names the
mechanism, then SaslAuthenticate carries the mechanism's messages
(:mod:`mm2py.protocol.sasl_mechanisms`, :mod:`mm2py.protocol.oauthbearer`); it returns the session
lifetime the broker announced. OAUTHBEARER sends the current token of the cluster's
:class:`~mm2py.client.oauth.TokenProvider` (a fresh one once the old one is due for refresh). Any
refusal — the broker does not enable the mechanism, the credentials or the token are refused, a
SCRAM server fails its own proof, no token could be had — raises
:class:`~mm2py.client.connection.AuthenticationError` with the broker's (or the token endpoint's)
message; it is never retried.
"""

from __future__ import annotations

from mm2py.client.connection import AuthenticationError, BrokerConnection
from mm2py.client.oauth import TokenError, TokenProvider
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
from mm2py.protocol.oauthbearer import ERROR_ACK, client_message
from mm2py.protocol.sasl_mechanisms import MECHANISMS, OAUTHBEARER, PLAIN, ScramClient, plain_message


class SaslAuthenticator:
    """Authenticates each new connection as ``username`` with ``mechanism``."""

    def __init__(self, mechanism: str, username: str, password: str = "", *, cluster: str = "",
                 tokens: TokenProvider | None = None) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"unsupported SASL mechanism {mechanism!r} (supported: {', '.join(MECHANISMS)})")
        if (mechanism == OAUTHBEARER) != (tokens is not None):
            raise ValueError("OAUTHBEARER, and only it, authenticates with a token provider")
        self.mechanism = mechanism
        #: the user, or for OAUTHBEARER the OIDC client id (the principal comes from the token)
        self.username = username
        self._password = password
        self.cluster = cluster
        self.tokens = tokens

    def __repr__(self) -> str:  # never shows the password
        return f"SaslAuthenticator({self.mechanism}, user={self.username!r}, cluster={self.cluster!r})"

    def _error(self, conn: BrokerConnection, reason: str) -> AuthenticationError:
        where = f"cluster '{self.cluster}' (broker {conn.host}:{conn.port})" if self.cluster else (
            f"broker {conn.host}:{conn.port}")
        who = f"of {self.tokens.settings.who} " if self.tokens else f"of user '{self.username}' "
        return AuthenticationError(f"SASL {self.mechanism} authentication {who}to {where} failed: {reason}")

    async def authenticate(self, conn: BrokerConnection) -> int:
        """Authenticate ``conn`` (again, when it already is); the session lifetime in ms (0: none)."""
        try:
            await self._handshake(conn)
            version = pick_version(SASL_AUTHENTICATE, conn.api_versions, SASL_VERSIONS)
            if self.tokens is not None:
                return await self._oauthbearer(conn, version, self.tokens)
            if self.mechanism == PLAIN:
                resp = await self._round(conn, version, plain_message(self.username, self._password))
                return resp.session_lifetime_ms
            scram = ScramClient(self.mechanism, self.username, self._password)
            server_first = await self._round(conn, version, scram.first_message())
            client_final = scram.final_message(server_first.auth_bytes)
            server_final = await self._round(conn, version, client_final)
            scram.verify_server_final(server_final.auth_bytes)
            return server_final.session_lifetime_ms
        except TokenError as e:
            raise self._error(conn, str(e)) from None
        except ProtocolError as e:  # malformed SCRAM messages, no common API version
            raise self._error(conn, str(e)) from e

    async def _oauthbearer(self, conn: BrokerConnection, version: int, tokens: TokenProvider) -> int:
        # a session lasts no longer than the token it was opened with: one with less than half its
        # lifetime left is replaced first, so sessions (and the time left to renew them) stay long
        token = await tokens.current(fresh=0.5)
        resp = await self._round(conn, version, client_message(token.value, dict(tokens.settings.extensions)))
        if resp.auth_bytes:  # the broker refused the token: its status document, then the failure
            status = bytes(resp.auth_bytes).decode("utf-8", "replace")
            try:
                await self._round(conn, version, ERROR_ACK)
            except AuthenticationError as e:
                reason = str(e).rpartition("failed: ")[2]
                raise self._error(conn, f"{reason} (token status: {status})") from None
            raise self._error(conn, f"token refused: {status}")
        return resp.session_lifetime_ms

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
        return resp
