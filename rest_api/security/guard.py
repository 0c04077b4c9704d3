"""Who calls, and what they may do: an ASGI middleware in front of the whole REST API.

1. **Authentication.** With Connect's Basic extension on (:mod:`~mm2py.rest_api.security.basic`)
   or bearer tokens (:mod:`~mm2py.rest_api.security.tokens`), every request must carry valid
   credentials in ``Authorization``; otherwise 401 with ``WWW-Authenticate`` (``Basic
   realm="KafkaConnect"``, ``Bearer``), in Connect's ``{"error_code", "message"}`` body on the
   Connect routes and ``{"error"}`` elsewhere. With neither, a verified client certificate names the
   caller (mutual TLS), and without one the caller is ``anonymous``.
2. **Roles.** A caller in ``mm2py.rest.read.only.users`` (a certificate's subject matches by its
   full name or its ``CN=...``), or whose token carries the read-only claim, may read but not
   change: 403 on every other method (Connect's ``config/validate``, which changes nothing, aside).
3. **Audit.** Every change, refused or not, writes one line (:mod:`~mm2py.rest_api.security.audit`).

PAGE_SHELL is the one exception to 1 (see there).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol

from mm2py.errors import Mm2pyError
from mm2py.rest_api.security.audit import audit_change
from mm2py.rest_api.security.basic import BasicAuth, parse_basic
from mm2py.rest_api.security.settings import RestSettings

__all__ = ["PAGE_SHELL", "Caller", "Guard", "TokenCheck", "UnauthenticatedError"]

Scope = MutableMapping[str, Any]
Asgi = Callable[[Scope, Any, Any], Awaitable[None]]
_READS = frozenset({"GET", "HEAD", "OPTIONS"})
#: changes nothing though not a read (Connect's config validation): open to read-only callers
_EXEMPT = ("/config/validate",)
#: PAGE_SHELL: the operator page's own files (HTML, script, style; no data of the worker's), served
#: to a GET without credentials when the API takes bearer tokens and no Basic: a browser cannot send
#: a token when it opens a page, so the page asks for one and sends it with each of its calls (its
#: data, ``/ui/state`` and the rest, stays behind the token). With Basic on, the browser's prompt
#: covers the page too, and nothing is open.
PAGE_SHELL = frozenset({"/ui", "/ui/", "/ui/app.js", "/ui/style.css"})


@dataclass(frozen=True)
class Caller:
    """Who a request comes from: ``name`` (a user, a token's subject, a certificate's subject)."""

    name: str
    read_only: bool = False


class UnauthenticatedError(Mm2pyError):
    """A REST caller's credentials missing or wrong: a 401 with this message (never the credentials)."""


class TokenCheck(Protocol):
    """Bearer tokens' check: the caller a valid token names, or :class:`UnauthenticatedError`."""

    async def caller(self, token: str) -> Caller: ...


class Guard:
    """The middleware (``app``: the REST API; ``in_connect(path)``: a Connect-shaped route)."""

    def __init__(self, app: Asgi, *, settings: RestSettings, in_connect: Callable[[str], bool],
                 basic: BasicAuth | None = None, tokens: TokenCheck | None = None) -> None:
        self.app = app
        self.settings = settings
        self.in_connect = in_connect
        self.basic = basic
        self.tokens = tokens
        self.challenges = ([(b"www-authenticate", f'Basic realm="{basic.realm}", charset="UTF-8"'.encode())]
                           if basic is not None else [])
        if tokens is not None:
            self.challenges.append((b"www-authenticate", b'Bearer realm="mm2py"'))

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        client = (scope.get("client") or (None,))[0]
        status = [500]

        async def sent(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        caller_name = "-"
        try:
            try:
                caller = await self._caller(scope)
            except UnauthenticatedError as refused:
                await self._answer(sent, path, 401, str(refused), self._challenges(scope))
                return
            caller_name = caller.name
            if method not in _READS and self._read_only(caller) and not path.rstrip("/").endswith(_EXEMPT):
                await self._answer(sent, path, 403, f"{caller.name} may read but not change anything "
                                   "(mm2py.rest.read.only.users): nothing was changed")
                return
            await self.app(scope, receive, sent)
        finally:
            if method not in _READS:
                audit_change(caller_name, method, path, status[0], client)

    async def _caller(self, scope: Scope) -> Caller:
        header = _header(scope, b"authorization")
        if (header is None and self.basic is None and self.tokens is not None
                and scope["method"] == "GET" and scope["path"] in PAGE_SHELL):
            return Caller("anonymous")  # PAGE_SHELL: the page's own files, no data (see there)
        subject = ((scope.get("extensions") or {}).get("tls") or {}).get("client_cert_name")
        if self.basic is None and self.tokens is None:
            return Caller(subject or "anonymous")
        if header is None:
            raise UnauthenticatedError("this REST API needs credentials: " + self._schemes())
        scheme, _, credentials = header.strip().partition(" ")
        if scheme.lower() == "basic" and self.basic is not None:
            pair = parse_basic(header)
            if pair is None:
                raise UnauthenticatedError("a malformed Basic Authorization header")
            if not self.basic.check(*pair):
                raise UnauthenticatedError("the user name or password is wrong")
            return Caller(pair[0])
        if scheme.lower() == "bearer" and self.tokens is not None and credentials.strip():
            return await self.tokens.caller(credentials.strip())
        raise UnauthenticatedError(f"an Authorization header this REST API does not take: use "
                                   f"{self._schemes()}")

    def _challenges(self, scope: Scope) -> list[tuple[bytes, bytes]]:
        """``WWW-Authenticate`` of a 401: each scheme taken; a refused token says so (RFC 6750)."""
        header = (_header(scope, b"authorization") or "").strip().lower()
        if self.tokens is None or not header.startswith("bearer "):
            return self.challenges
        return [c for c in self.challenges if not c[1].startswith(b"Bearer")] + [
            (b"www-authenticate", b'Bearer realm="mm2py", error="invalid_token"')]

    def _schemes(self) -> str:
        return " or ".join(name for name, on in (("HTTP Basic", self.basic), ("a Bearer token", self.tokens))
                           if on is not None)

    def _read_only(self, caller: Caller) -> bool:
        users = self.settings.read_only_users
        common_names = [part for part in caller.name.split(",") if part.upper().startswith("CN=")]
        return caller.read_only or caller.name in users or any(cn in users for cn in common_names)

    async def _answer(self, send: Any, path: str, status: int, message: str,
                      headers: list[tuple[bytes, bytes]] | None = None) -> None:
        body = {"error_code": status, "message": message} if self.in_connect(path) else {"error": message}
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
            *(headers or [])]})
        await send({"type": "http.response.body", "body": data})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None
