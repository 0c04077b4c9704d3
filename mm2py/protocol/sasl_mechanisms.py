"""SASL mechanisms a Kafka client speaks, as pure functions over bytes: PLAIN and SCRAM (OAUTHBEARER's
message and tokens are in :mod:`mm2py.protocol.oauthbearer`), and when to re-authenticate (KIP-368).

PLAIN (RFC 4616) is one message: ``authzid NUL username NUL password``.

SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) is two round trips. The client sends
``n,,n=<user>,r=<client nonce>``; the server answers ``r=<nonce>,s=<salt>,i=<iterations>``; the
client proves it knows the password with ``c=biws,r=<nonce>,p=<proof>``; the server proves it knows
the stored credential with ``v=<signature>``, which the client verifies before trusting the
connection. Kafka takes the password's UTF-8 bytes as they are (no SASLprep) and requires at least
4096 iterations; so does this client.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

from mm2py.protocol.errors import ProtocolError

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
OAUTHBEARER = "OAUTHBEARER"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)

MIN_ITERATIONS = 4096
#: refuse absurd iteration counts a hostile server could use to burn our CPU
MAX_ITERATIONS = 1 << 20
_GS2_HEADER = "n,,"


class SaslMechanismError(ProtocolError):
    """A SASL exchange that cannot go on: malformed server message, or a server that failed its proof."""


def plain_message(username: str, password: str, authzid: str = "") -> bytes:
    """The single PLAIN client message."""
    parts = (authzid, username, password)
    if any("\x00" in p for p in parts):
        raise ValueError("PLAIN credentials may not contain NUL characters")
    return "\x00".join(parts).encode("utf-8")


def _saslname(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: bytes, what: str) -> dict[str, str]:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslMechanismError(f"SCRAM {what} is not UTF-8") from None
    out: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if len(key) != 1 or not eq:
            raise SaslMechanismError(f"malformed SCRAM {what}: {text[:200]!r}")
        out.setdefault(key, value)
    return out


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise SaslMechanismError(f"SCRAM {what} is not valid base64") from None


class ScramClient:
    """One SCRAM exchange: :meth:`first_message`, :meth:`final_message`, :meth:`verify_server_final`."""

    def __init__(self, mechanism: str, username: str, password: str, *, nonce: str | None = None) -> None:
        if mechanism not in SCRAM_HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r} (expected one of {list(SCRAM_HASHES)})")
        self.mechanism = mechanism
        self._hash = SCRAM_HASHES[mechanism]
        self._password = password.encode("utf-8")
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        if not self._nonce or "," in self._nonce or not self._nonce.isprintable():
            raise ValueError("a SCRAM nonce is printable and has no comma")
        self._first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature: bytes | None = None

    def first_message(self) -> bytes:
        return (_GS2_HEADER + self._first_bare).encode("utf-8")

    def _hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self._hash).digest()

    def final_message(self, server_first: bytes) -> bytes:
        """The client-final message (with the proof) for the server-first message."""
        attrs = _attributes(server_first, "server-first message")
        if "e" in attrs:
            raise SaslMechanismError(f"server refused the SCRAM exchange: {attrs['e']}")
        if "m" in attrs:
            raise SaslMechanismError("server requires a SCRAM extension this client does not know")
        missing = [k for k in ("r", "s", "i") if k not in attrs]
        if missing:
            raise SaslMechanismError(f"SCRAM server-first message lacks {', '.join(missing)}")
        nonce = attrs["r"]
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslMechanismError("SCRAM server nonce does not extend the client nonce")
        salt = _b64decode(attrs["s"], "salt")
        if not attrs["i"].isdigit():
            raise SaslMechanismError(f"SCRAM iteration count {attrs['i'][:20]!r} is not a number")
        iterations = int(attrs["i"])
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise SaslMechanismError(
                f"SCRAM iteration count {iterations} outside {MIN_ITERATIONS}..{MAX_ITERATIONS}"
            )
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        channel = base64.b64encode(_GS2_HEADER.encode()).decode()
        without_proof = f"c={channel},r={nonce}"
        auth_message = ",".join((self._first_bare, server_first.decode("utf-8"), without_proof)).encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Raise unless the server-final message carries the server signature we expect."""
        if self._server_signature is None:
            raise SaslMechanismError("SCRAM server-final message before the client-final one")
        attrs = _attributes(server_final, "server-final message")
        if "e" in attrs:
            raise SaslMechanismError(f"server refused the SCRAM proof: {attrs['e']}")
        if "v" not in attrs:
            raise SaslMechanismError("SCRAM server-final message has no server signature")
        if not hmac.compare_digest(_b64decode(attrs["v"], "server signature"), self._server_signature):
            raise SaslMechanismError("SCRAM server signature does not match: the server does not know "
                                     "this user's credential")


#: a re-authentication starts at least this long before its session ends (unless that is before
#: half the session): a request written just before it may wait in the broker behind a long-polling
#: fetch (``fetch.max.wait.ms``, 500 ms by default), since a broker reads one request of a connection
#: at a time, and the timer of a busy process's event loop may fire late. The Java client's 5-15% of
#: the lifetime alone leaves 80 ms of a 1.6 s session, which a loaded machine misses
SESSION_END_RESERVE_S = 1.0


def reauthentication_delay(session_lifetime_ms: int, rnd: float,
                           reserve_s: float = SESSION_END_RESERVE_S) -> float:
    """Seconds after an authentication began at which the client authenticates again (KIP-368): at a
    point between 85% and 95% of the session lifetime the broker announced (``rnd`` in [0, 1)), as
    the Java client does, but no later than ``reserve_s`` before the session ends unless that is
    before half of it, so the broker never reads a request of ours after the session ended."""
    lifetime = session_lifetime_ms / 1000
    return min(lifetime * (0.85 + 0.10 * rnd), max(lifetime - reserve_s, lifetime / 2))
