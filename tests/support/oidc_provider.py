"""A small OIDC identity provider on loopback for OAUTHBEARER tests: a token endpoint and a JWKS.

:class:`LocalIdentityProvider` generates an RSA key and serves, over HTTP and over HTTPS (a
certificate for 127.0.0.1/localhost from a CA of its own, ``ca_file``):

- ``POST /token``: the OAuth client credentials grant. The client authenticates with HTTP Basic
  (or ``client_id``/``client_secret`` form fields); a known client gets an RS256-signed JWT
  (``sub`` = the client id, ``iat``, ``exp`` = ``token_lifetime_s`` later, ``scope``, ``iss``,
  ``kid`` in the header) as ``{"access_token", "token_type", "expires_in"}``; an unknown client or
  a wrong secret gets ``401 {"error": "invalid_client", ...}``.
- ``GET /jwks``: the public key as a JSON Web Key Set, which a broker's
  ``OAuthBearerValidatorCallbackHandler`` reads (``sasl.oauthbearer.jwks.endpoint.url``).

It is the identity provider of the tests, not a broker; it counts the tokens it issued.
"""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mm2py.kafka_local.security import _ca, _leaf, _pem, _pkcs8


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _int_b64url(n: int) -> str:
    return _b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


class LocalIdentityProvider:
    """Token endpoint + JWKS on 127.0.0.1 (HTTP and HTTPS), for ``clients`` (id -> secret)."""

    def __init__(self, directory: Path, clients: Mapping[str, str], *, token_lifetime_s: int = 3600,
                 scope: str = "kafka") -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.directory = Path(directory)
        self.clients = dict(clients)
        self.token_lifetime_s = token_lifetime_s
        self.scope = scope
        self.issuer = "mm2py-test-idp"
        self.kid = "mm2py-test-key"
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._lock = threading.Lock()
        #: tokens issued, by client id
        self.issued: dict[str, int] = {}
        self._servers: list[ThreadingHTTPServer] = []

    # -- tokens ----------------------------------------------------------------------------------
    def sign(self, claims: Mapping[str, Any]) -> str:
        """An RS256 JWS of ``claims`` with this provider's key."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(dict(claims)).encode())}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"

    def token_for(self, client_id: str, lifetime_s: int | None = None) -> str:
        now = int(time.time())
        return self.sign({"sub": client_id, "iss": self.issuer, "iat": now,
                          "exp": now + (lifetime_s or self.token_lifetime_s), "scope": self.scope})

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid,
                          "n": _int_b64url(numbers.n), "e": _int_b64url(numbers.e)}]}

    def _grant(self, auth_header: str | None, form: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        if auth_header and auth_header.startswith("Basic "):
            decoded = base64.b64decode(auth_header[6:]).decode()
            client_id, _, secret = decoded.partition(":")
            client_id, secret = urllib.parse.unquote(client_id), urllib.parse.unquote(secret)
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type",
                         "error_description": f"grant_type {form.get('grant_type')!r} is not supported"}
        if self.clients.get(client_id) != secret or not client_id:
            return 401, {"error": "invalid_client", "error_description": "client authentication failed"}
        with self._lock:
            self.issued[client_id] = self.issued.get(client_id, 0) + 1
        return 200, {"access_token": self.token_for(client_id), "token_type": "Bearer",
                     "expires_in": self.token_lifetime_s}

    # -- serving ---------------------------------------------------------------------------------
    def start(self) -> LocalIdentityProvider:
        self.directory.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.UTC)
        ca_key, ca_cert = _ca("mm2py test IdP CA", now)
        key, cert = _leaf("idp", ca_key, ca_cert, now, server=True)
        self.ca_file.write_bytes(_pem(ca_cert))
        server_pem = self.directory / "idp-server.pem"
        server_pem.write_bytes(_pkcs8(key) + _pem(cert))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(server_pem)
        for tls in (False, True):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
            if tls:
                server.socket = context.wrap_socket(server.socket, server_side=True)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, name="mm2py-idp", daemon=True).start()
            self._servers.append(server)
        return self

    @property
    def ca_file(self) -> Path:
        """The CA that signed the HTTPS endpoint's certificate."""
        return self.directory / "idp-ca.pem"

    def _url(self, tls: bool, path: str) -> str:
        server = self._servers[1 if tls else 0]
        return f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}{path}"

    def token_url(self, tls: bool = True) -> str:
        return self._url(tls, "/token")

    def jwks_url(self, tls: bool = False) -> str:
        return self._url(tls, "/jwks")

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def __enter__(self) -> LocalIdentityProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler(idp: LocalIdentityProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/jwks":
                self._answer(200, idp.jwks())
            else:
                self._answer(404, {"error": "not_found"})

        def do_POST(self) -> None:
            if self.path != "/token":
                self._answer(404, {"error": "not_found"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            self._answer(*idp._grant(self.headers.get("Authorization"), form))

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler
