"""mm2py.rest_api.security.guard, the REST API's middleware, called as ASGI: who the caller is (Basic,
a bearer token, a client certificate, or anonymous), 401 with the challenges when credentials are
missing or wrong, 403 for a read-only caller's change (config/validate aside), the operator page's
shell open without a token, and one audit line per change, refused or not."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from mm2py.rest_api.security.audit import AUDIT_LOGGER
from mm2py.rest_api.security.basic import BasicAuth
from mm2py.rest_api.security.guard import Caller, Guard, UnauthenticatedError
from mm2py.rest_api.security.settings import RestSettings, parse_listeners
from tests.support.rest_security import connect_basic_auth_files


class App:
    """The REST API behind the guard: answers 200, or 500 by raising, and records what reached it."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.calls.append((scope["method"], scope["path"]))
        if self.fail:
            raise RuntimeError("the app failed")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


class Tokens:
    """A token check: ``ro:<name>`` and ``rw:<name>`` are valid, anything else refused."""

    async def caller(self, token: str) -> Caller:
        kind, _, name = token.partition(":")
        if kind not in ("ro", "rw") or not name:
            raise UnauthenticatedError("the bearer token is not accepted: bad")
        return Caller(name, read_only=kind == "ro")


def _settings(read_only_users: frozenset[str] = frozenset()) -> RestSettings:
    return RestSettings(listeners=parse_listeners("http://127.0.0.1:0"), read_only_users=read_only_users)


async def _call(guard: Guard, method: str, path: str, authorization: str | None = None,
                cert: str | None = None) -> tuple[int, dict[bytes, list[bytes]], dict[str, Any] | None]:
    headers = [] if authorization is None else [(b"Authorization", authorization.encode())]
    scope: dict[str, Any] = {"type": "http", "method": method, "path": path, "headers": headers,
                             "client": ("10.0.0.7", 5555)}
    if cert is not None:
        scope["extensions"] = {"tls": {"client_cert_name": cert}}
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    await guard(scope, receive, send)
    start = sent[0]
    got: dict[bytes, list[bytes]] = {}
    for k, v in start["headers"]:
        got.setdefault(k, []).append(v)
    body = sent[1]["body"]
    return start["status"], got, (json.loads(body) if body != b"ok" else None)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def basic(tmp_path: Path) -> BasicAuth:
    return BasicAuth(str(connect_basic_auth_files(tmp_path, {"alice": "pw-a", "bob": "pw-b"})))


def _connect(path: str) -> bool:
    return path.startswith("/c")


async def test_without_credentials_the_caller_is_anonymous_or_the_certificates_subject(
        caplog: pytest.LogCaptureFixture) -> None:
    app = App()
    guard = Guard(app, settings=_settings(frozenset({"CN=viewer"})), in_connect=_connect)
    caplog.set_level(logging.INFO, AUDIT_LOGGER)
    assert (await _call(guard, "POST", "/f"))[0] == 200
    status, _, body = await _call(guard, "POST", "/c", cert="CN=viewer,O=acme")
    assert status == 403 and body is not None
    assert body["error_code"] == 403 and "CN=viewer,O=acme may read but not change" in body["message"]
    assert app.calls == [("POST", "/f")]
    lines = [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER]
    assert lines == ['REST change: caller="anonymous" method=POST path=/f status=200 client=10.0.0.7',
                     'REST change: caller="CN=viewer,O=acme" method=POST path=/c status=403 '
                     'client=10.0.0.7']


async def test_basic_credentials_are_checked_and_a_refusal_carries_connects_challenge(
        basic: BasicAuth, caplog: pytest.LogCaptureFixture) -> None:
    app = App()
    guard = Guard(app, settings=_settings(frozenset({"bob"})), in_connect=_connect, basic=basic)
    caplog.set_level(logging.INFO, AUDIT_LOGGER)
    assert (await _call(guard, "GET", "/c", _basic("alice", "pw-a")))[0] == 200
    for auth, words in [(None, "needs credentials: HTTP Basic"), (_basic("alice", "wrong"), "is wrong"),
                        ("Basic !!!", "malformed Basic"), ("Bearer rw:x", "does not take: use HTTP Basic")]:
        status, headers, body = await _call(guard, "DELETE", "/c/x", auth)
        assert status == 401 and body is not None and words in body["message"], (auth, body)
        assert headers[b"www-authenticate"] == [b'Basic realm="KafkaConnect", charset="UTF-8"']
    status, _, body = await _call(guard, "GET", "/f", _basic("bob", "nope"))
    assert status == 401 and body == {"error": "the user name or password is wrong"}, "not a Connect route"
    # bob may read, and validate a config (it changes nothing), but not change
    assert (await _call(guard, "GET", "/f", _basic("bob", "pw-b")))[0] == 200
    validate = "/c-plugins/X/config/validate/"
    assert (await _call(guard, "PUT", validate, _basic("bob", "pw-b")))[0] == 200
    assert (await _call(guard, "PUT", "/c/x/pause", _basic("bob", "pw-b")))[0] == 403
    assert (await _call(guard, "PUT", "/c/x/pause", _basic("alice", "pw-a")))[0] == 200
    assert ("PUT", "/c/x/pause") in app.calls and ("DELETE", "/c/x") not in app.calls
    lines = [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER]
    assert len(lines) == 7, lines  # every change, refused or not; no line for a read
    assert lines[0].startswith('REST change: caller="-" method=DELETE path=/c/x status=401')
    assert all("pw-" not in line for line in lines)


async def test_bearer_tokens_name_the_caller_and_a_refused_one_says_invalid_token(basic: BasicAuth) -> None:
    app = App()
    guard = Guard(app, settings=_settings(), in_connect=_connect, basic=basic, tokens=Tokens())
    assert (await _call(guard, "POST", "/f", "Bearer rw:carol"))[0] == 200
    status, _, body = await _call(guard, "POST", "/f", "Bearer ro:dave")
    assert status == 403 and body == {"error": "dave may read but not change anything "
                                               "(mm2py.rest.read.only.users): nothing was changed"}
    status, headers, _ = await _call(guard, "GET", "/f", "Bearer forged")
    assert status == 401
    assert headers[b"www-authenticate"] == [b'Basic realm="KafkaConnect", charset="UTF-8"',
                                            b'Bearer realm="mm2py", error="invalid_token"']
    status, headers, body = await _call(guard, "GET", "/f")
    assert status == 401 and body is not None and "HTTP Basic or a Bearer token" in body["error"]
    assert headers[b"www-authenticate"] == [b'Basic realm="KafkaConnect", charset="UTF-8"',
                                            b'Bearer realm="mm2py"']
    assert (await _call(guard, "GET", "/ui"))[0] == 401, "with Basic on, the page's shell is not open"


async def test_with_tokens_only_the_pages_shell_is_open_without_one_and_nothing_else() -> None:
    app = App()
    guard = Guard(app, settings=_settings(), in_connect=_connect, tokens=Tokens())
    for path in ("/ui", "/ui/", "/ui/app.js", "/ui/style.css"):
        assert (await _call(guard, "GET", path))[0] == 200, path
    assert (await _call(guard, "GET", "/ui/data"))[0] == 401
    assert (await _call(guard, "POST", "/ui"))[0] == 401
    assert app.calls == [("GET", p) for p in ("/ui", "/ui/", "/ui/app.js", "/ui/style.css")]


async def test_a_failing_app_is_audited_as_500(caplog: pytest.LogCaptureFixture) -> None:
    guard = Guard(App(fail=True), settings=_settings(), in_connect=_connect)
    caplog.set_level(logging.INFO, AUDIT_LOGGER)
    with pytest.raises(RuntimeError, match="the app failed"):
        await _call(guard, "PATCH", "/f/a")
    assert [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER] == [
        'REST change: caller="anonymous" method=PATCH path=/f/a status=500 client=10.0.0.7']


async def test_non_http_scopes_pass_through_unchecked() -> None:
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    guard = Guard(app, settings=_settings(), in_connect=_connect, tokens=Tokens())
    await guard({"type": "lifespan"}, None, None)
    assert seen == ["lifespan"]
