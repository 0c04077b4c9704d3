"""SaslHandshake (api key 17, v0..v1) and SaslAuthenticate (api key 36, v0..v2) codecs.

A client that authenticates with SASL sends, after ApiVersions, one SaslHandshake naming its
mechanism, then one SaslAuthenticate per round of the mechanism's exchange (PLAIN: one round; SCRAM:
two). With SaslHandshake v1 the mechanism's bytes travel inside SaslAuthenticate requests (v0 sent
them as bare frames; mm2py never does). The mechanisms themselves are in :mod:`sasl_mechanisms`.
"""

from __future__ import annotations

from dataclasses import dataclass

from mm2py.protocol.framing import is_flexible
from mm2py.protocol.wire import Buf, Reader, Writer, protocol_guard

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

#: versions this client encodes/decodes (``pick_version(..., ours=SASL_VERSIONS)``)
SASL_VERSIONS: dict[int, tuple[int, int]] = {
    SASL_HANDSHAKE: (1, 1),
    SASL_AUTHENTICATE: (0, 2),
}


@dataclass(frozen=True, slots=True)
class SaslHandshakeResponse:
    error_code: int
    mechanisms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SaslAuthenticateResponse:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    #: v1+: the broker closes the connection after this many ms unless re-authenticated (0: never)
    session_lifetime_ms: int = 0


def encode_sasl_handshake_request(version: int, mechanism: str) -> bytes:
    w = Writer()
    w.string(mechanism, False)
    return w.getvalue()


@protocol_guard
def decode_sasl_handshake_response(body: memoryview | bytes, version: int) -> SaslHandshakeResponse:
    r = Reader(body)
    error_code = r.int16()
    mechanisms = tuple(r.string(False) for _ in range(r.array_len(False, 2)))
    return SaslHandshakeResponse(error_code, mechanisms)


def encode_sasl_authenticate_request(version: int, auth_bytes: Buf) -> bytes:
    flexible = is_flexible(SASL_AUTHENTICATE, version)
    w = Writer()
    w.nullable_bytes(auth_bytes, flexible)
    w.empty_tags(flexible)
    return w.getvalue()


@protocol_guard
def decode_sasl_authenticate_response(body: memoryview | bytes, version: int) -> SaslAuthenticateResponse:
    flexible = is_flexible(SASL_AUTHENTICATE, version)
    r = Reader(body)
    error_code = r.int16()
    message = r.nullable_string(flexible)
    auth = r.nullable_bytes(flexible)
    lifetime = r.int64() if version >= 1 else 0
    r.skip_tagged_fields(flexible)
    return SaslAuthenticateResponse(error_code, message, b"" if auth is None else bytes(auth), lifetime)
