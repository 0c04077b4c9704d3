"""mm2py.rest_api.security.tokens: bearer tokens checked against a local OIDC issuer's JWKS (served on
loopback by tests/support/oidc_provider.py): the caller is the principal claim, a true read-only
claim makes it read-only, and an expired, forged, wrongly addressed or unsigned token is refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mm2py.rest_api.security.guard import Caller, UnauthenticatedError
from mm2py.rest_api.security.settings import JwtSettings
from mm2py.rest_api.security.tokens import JwksTokens
from tests.support.oidc_provider import LocalIdentityProvider


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalIdentityProvider]:
    with LocalIdentityProvider(tmp_path_factory.mktemp("idp"), {}).start() as provider:
        yield provider


def _tokens(idp: LocalIdentityProvider, **more: object) -> JwksTokens:
    return JwksTokens(JwtSettings.model_validate({"mm2py.rest.jwt.jwks.url": idp.jwks_url(), **more}))


def _claims(idp: LocalIdentityProvider, **more: object) -> dict[str, object]:
    now = int(time.time())
    return {"sub": "alice", "iss": idp.issuer, "iat": now, "exp": now + 600, **more}


async def test_a_valid_token_names_its_subject_and_the_read_only_claim_is_honoured(
        idp: LocalIdentityProvider) -> None:
    tokens = _tokens(idp)
    assert await tokens.caller(idp.sign(_claims(idp))) == Caller("alice", read_only=False)
    for claim in (True, "true"):
        assert await tokens.caller(idp.sign(_claims(idp, mm2py_read_only=claim))) == Caller("alice", True)
    assert (await tokens.caller(idp.sign(_claims(idp, mm2py_read_only="yes")))).read_only is False
    other = _tokens(idp, **{"mm2py.rest.jwt.principal.claim": "email",
                            "mm2py.rest.jwt.read.only.claim": "viewer"})
    assert await other.caller(idp.sign(_claims(idp, email="a@x", viewer=True))) == Caller("a@x", True)
    with pytest.raises(UnauthenticatedError, match="no 'email' claim naming the caller"):
        await other.caller(idp.sign(_claims(idp)))


@pytest.mark.parametrize(("claims", "settings", "words"), [
    ({"exp": int(time.time()) - 120}, {}, "expired"),
    ({"exp": None}, {}, "exp"),
    ({"iss": "someone-else"}, {"mm2py.rest.jwt.issuer": "mm2py-test-idp"}, "issuer"),
    ({"aud": "other-api"}, {"mm2py.rest.jwt.audience": "mm2py-api"}, "audience"),
    ({}, {"mm2py.rest.jwt.audience": "mm2py-api"}, "aud"),
])
async def test_a_token_failing_a_check_is_refused(idp: LocalIdentityProvider, claims: dict[str, object],
                                                  settings: dict[str, object], words: str) -> None:
    body = {k: v for k, v in {**_claims(idp), **claims}.items() if v is not None}
    with pytest.raises(UnauthenticatedError, match="the bearer token is not accepted") as err:
        await _tokens(idp, **settings).caller(idp.sign(body))
    assert words in str(err.value).lower()


async def test_audience_and_issuer_set_accept_a_token_carrying_them(idp: LocalIdentityProvider) -> None:
    tokens = _tokens(idp, **{"mm2py.rest.jwt.audience": "mm2py-api", "mm2py.rest.jwt.issuer": idp.issuer})
    assert await tokens.caller(idp.sign(_claims(idp, aud="mm2py-api"))) == Caller("alice")


async def test_a_token_signed_by_another_key_or_with_a_shared_secret_is_refused(
        idp: LocalIdentityProvider, tmp_path: Path) -> None:
    tokens = _tokens(idp)
    forger = LocalIdentityProvider(tmp_path, {})  # same key id, another key: never started
    with pytest.raises(UnauthenticatedError, match="not accepted"):
        await tokens.caller(forger.sign(_claims(idp)))

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": idp.kid}).encode())
    signing_input = f"{head}.{b64(json.dumps(_claims(idp)).encode())}"
    mac = hmac.new(b"a shared secret", signing_input.encode(), hashlib.sha256).digest()
    with pytest.raises(UnauthenticatedError, match="not accepted"):
        await tokens.caller(f"{signing_input}.{b64(mac)}")
    with pytest.raises(UnauthenticatedError, match="not accepted"):
        await tokens.caller("not-a-jwt")


async def test_keys_out_of_reach_refuse_the_token_without_naming_it(idp: LocalIdentityProvider) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tokens = JwksTokens(JwtSettings.model_validate({"mm2py.rest.jwt.jwks.url": f"http://127.0.0.1:{port}/jwks"}))
    token = idp.sign(_claims(idp))
    with pytest.raises(UnauthenticatedError, match="issuer's keys are out of reach") as err:
        await tokens.caller(token)
    assert token not in str(err.value)
