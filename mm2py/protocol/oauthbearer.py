"""SASL/OAUTHBEARER (RFC 7628, KIP-255, KIP-768) as pure functions: the client's message, the
access token's claims, Kafka's unsecured development tokens, and when to refresh or re-authenticate.

The client sends one message: ``n,,<0x01>auth=Bearer <token><0x01>[<key>=<value><0x01>]...<0x01>``
(the optional ``key=value`` pairs are SASL extensions, e.g. Confluent Cloud's ``logicalCluster``).
A broker that accepts the token answers with nothing; one that refuses it answers with a JSON
status document, to which the client must answer ``0x01`` before the broker fails the exchange.

A token is a JWT. The client does not check its signature (the broker does); like the Java
client it reads the expiry (``exp``), issue time (``iat``), subject (``sub`` or the claim
``sasl.oauthbearer.sub.claim.name`` names) and scope (``scope`` or
``sasl.oauthbearer.scope.claim.name``) from it, and refuses a token without expiry or subject.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.sasl_mechanisms import OAUTHBEARER

__all__ = ["OAUTHBEARER", "AccessToken", "RefreshPolicy", "TokenFormatError", "client_message", "jwt_claims",
           "parse_token", "unsecured_extensions", "unsecured_token"]
#: the client's answer to a broker's error challenge (RFC 7628 section 3.2.3)
ERROR_ACK = b"\x01"
_SEP = "\x01"
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
#: Kafka's options of the unsecured login (``OAuthBearerLoginModule`` without a callback handler)
UNSECURED_PREFIX = "unsecuredLogin"
UNSECURED_LIFETIME_S = 3600


class TokenFormatError(ProtocolError):
    """An access token that cannot be used: not a JWT, or without expiry or subject."""


@dataclass(frozen=True)
class AccessToken:
    """A token and what the client needs to know about it (times in seconds since the epoch)."""

    value: str = field(repr=False)
    principal: str
    expires_at: float
    issued_at: float
    scope: tuple[str, ...] = ()

    @property
    def lifetime(self) -> float:
        return self.expires_at - self.issued_at


def check_extensions(extensions: Mapping[str, str]) -> None:
    """Raise ValueError for an extension RFC 7628 (and Kafka) would refuse; never shows values."""
    for key, value in extensions.items():
        if key == "auth" or not _EXTENSION_KEY.fullmatch(key):
            raise ValueError(f"SASL extension name {key!r} is not allowed (letters only, not 'auth')")
        if not _EXTENSION_VALUE.fullmatch(value):
            raise ValueError(f"SASL extension {key!r} has characters RFC 7628 does not allow in a value")


def client_message(token: str, extensions: Mapping[str, str] | None = None, authzid: str = "") -> bytes:
    """The client's single OAUTHBEARER message."""
    ext = dict(extensions or {})
    check_extensions(ext)
    if not token or any(c in token for c in (_SEP, " ")):
        raise ValueError("an OAUTHBEARER token is non-empty and has no spaces or 0x01 characters")
    pairs = "".join(f"{k}={v}{_SEP}" for k, v in ext.items())
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}{_SEP}auth=Bearer {token}{_SEP}{pairs}{_SEP}".encode()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64url(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise TokenFormatError("the token is not a JWT: a part is not base64url") from None


def jwt_claims(token: str) -> dict[str, Any]:
    """The payload of a JWS compact serialization (``header.payload.signature``), unverified."""
    parts = token.split(".")
    if len(parts) != 3 or not parts[1]:
        raise TokenFormatError(f"the token is not a JWT (it has {len(parts)} dot-separated parts, not 3)")
    try:
        claims = json.loads(_unb64url(parts[1]))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise TokenFormatError("the token is not a JWT: its payload is not JSON") from None
    if not isinstance(claims, dict):
        raise TokenFormatError("the token is not a JWT: its payload is not a JSON object")
    return claims


def _number(claims: Mapping[str, Any], name: str, required: bool) -> float | None:
    value = claims.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        what = "missing" if value is None else "not a number"
        raise TokenFormatError(f"the token's {name!r} claim is {what}")
    return float(value)


def parse_token(token: str, *, sub_claim: str = "sub", scope_claim: str = "scope",
                now: float | None = None) -> AccessToken:
    """Read a JWT access token as the Java client's validator does: ``exp`` and the subject claim
    required, ``iat`` and the scope optional (scope: a space-separated string or a list)."""
    claims = jwt_claims(token)
    expires_at = _number(claims, "exp", True)
    assert expires_at is not None
    issued_at = _number(claims, "iat", False)
    principal = claims.get(sub_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise TokenFormatError(f"the token has no subject: claim {sub_claim!r} is missing or empty")
    scope = claims.get(scope_claim)
    scopes: tuple[str, ...] = ()
    if isinstance(scope, str):
        scopes = tuple(scope.split())
    elif isinstance(scope, list):
        scopes = tuple(str(s) for s in scope)
    start = issued_at if issued_at is not None else (now if now is not None else expires_at)
    return AccessToken(token, principal, expires_at, min(start, expires_at), scopes)


def unsecured_token(options: Mapping[str, str], now: float) -> AccessToken:
    """Kafka's unsecured development token (``alg: none``) from the login module's
    ``unsecuredLogin*`` options: ``StringClaim_<name>``, ``NumberClaim_<name>``, ``ListClaim_<name>``
    (the first character is the separator), ``PrincipalClaimName`` (``sub``), ``LifetimeSeconds``
    (3600), ``ScopeClaimName`` (``scope``)."""
    principal_claim = options.get(f"{UNSECURED_PREFIX}PrincipalClaimName", "sub")
    scope_claim = options.get(f"{UNSECURED_PREFIX}ScopeClaimName", "scope")
    lifetime = options.get(f"{UNSECURED_PREFIX}LifetimeSeconds", str(UNSECURED_LIFETIME_S))
    try:
        seconds = int(lifetime)
    except ValueError:
        raise ValueError(f"{UNSECURED_PREFIX}LifetimeSeconds is not a whole number: {lifetime!r}") from None
    claims: dict[str, Any] = {"iat": int(now), "exp": int(now) + seconds}
    for key, value in options.items():
        kind, _, name = key.removeprefix(UNSECURED_PREFIX).partition("Claim_")
        if not key.startswith(UNSECURED_PREFIX) or not name:
            continue
        if kind == "String":
            claims[name] = value
        elif kind == "Number":
            try:
                claims[name] = float(value) if "." in value else int(value)
            except ValueError:
                raise ValueError(f"{key} is not a number: {value!r}") from None
        elif kind == "List":
            claims[name] = [v for v in value[1:].split(value[0]) if v] if value else []
        else:
            raise ValueError(f"unknown unsecured login option {key!r}")
    if not isinstance(claims.get(principal_claim), str) or not claims[principal_claim]:
        raise ValueError(f"the unsecured login needs {UNSECURED_PREFIX}StringClaim_{principal_claim}=\"...\" "
                         "(the principal)")
    value = ".".join((_b64url(b'{"alg":"none"}'), _b64url(json.dumps(claims).encode()), ""))
    return parse_token(value, sub_claim=principal_claim, scope_claim=scope_claim)


def unsecured_extensions(options: Mapping[str, str]) -> dict[str, str]:
    """The ``unsecuredLoginExtension_<name>`` options of the unsecured login."""
    prefix = f"{UNSECURED_PREFIX}Extension_"
    return {k.removeprefix(prefix): v for k, v in options.items() if k.startswith(prefix)}


@dataclass(frozen=True)
class RefreshPolicy:
    """``sasl.login.refresh.*``, with the Java client's defaults and meanings."""

    window_factor: float = 0.8
    window_jitter: float = 0.05
    min_period_s: float = 60.0
    buffer_s: float = 300.0

    def refresh_at(self, token: AccessToken, now: float, rnd: float) -> float:
        """When to fetch the next token: at ``window_factor`` (+ up to ``window_jitter``, ``rnd``
        in [0, 1)) of the token's lifetime, but not later than ``buffer_s`` before its expiry nor
        sooner than ``min_period_s`` from now; both limits are dropped when the remaining lifetime
        cannot hold them together (short-lived tokens)."""
        if now >= token.expires_at:
            return now
        factor = self.window_factor + self.window_jitter * rnd
        if now + self.min_period_s + self.buffer_s > token.expires_at:
            return now + (token.expires_at - now) * factor
        proposed = token.issued_at + token.lifetime * factor
        proposed = min(proposed, token.expires_at - self.buffer_s)
        return max(proposed, now + self.min_period_s)

