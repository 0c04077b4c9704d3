"""OAUTHBEARER without a broker: the client message, tokens, refresh times, re-authentication
times, the Java configuration read into OAuthSettings, and the token provider's cache."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from mm2py.client.oauth import OAuthSettings, TokenError, TokenProvider
from mm2py.config.errors import ConfigError
from mm2py.config.security import parse_security
from mm2py.protocol.oauthbearer import (
    AccessToken,
    RefreshPolicy,
    TokenFormatError,
    client_message,
    jwt_claims,
    parse_token,
    unsecured_token,
)
from mm2py.protocol.sasl_mechanisms import reauthentication_delay

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
SECRET = "s3cr3t-value"


def jwt(claims: dict[str, Any]) -> str:
    def part(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


# ---------------------------------------------------------------------------------- protocol


def test_client_message_with_extensions() -> None:
    msg = client_message("abc.def.ghi", {"logicalCluster": "lkc-1", "identityPoolId": "pool-2"})
    assert msg == b"n,,\x01auth=Bearer abc.def.ghi\x01logicalCluster=lkc-1\x01identityPoolId=pool-2\x01\x01"
    assert client_message("t") == b"n,,\x01auth=Bearer t\x01\x01"


@pytest.mark.parametrize("ext", [{"auth": "x"}, {"bad_name": "x"}, {"ok": "tab\x00"}, {"ok": ""}])
def test_extensions_rfc7628_refuses(ext: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="extension"):
        client_message("t", ext)


def test_parse_token_reads_the_claims_java_reads() -> None:
    token = parse_token(jwt({"sub": "mirror", "exp": 2000, "iat": 1000, "scope": "kafka read"}))
    assert (token.principal, token.expires_at, token.issued_at, token.scope) == (
        "mirror", 2000.0, 1000.0, ("kafka", "read"))
    custom = parse_token(jwt({"client_id": "c1", "exp": 2000, "scp": ["a", "b"]}), sub_claim="client_id",
                         scope_claim="scp", now=1500)
    assert (custom.principal, custom.issued_at, custom.scope) == ("c1", 1500.0, ("a", "b"))
    assert "value" not in repr(custom) and custom.value not in repr(custom)


@pytest.mark.parametrize(("token", "text"), [
    ("not-a-jwt", "not a JWT"),
    ("a.!!!.c", "not a JWT"),
    (jwt({"sub": "x"}), "'exp' claim is missing"),
    (jwt({"sub": "x", "exp": "soon"}), "not a number"),
    (jwt({"exp": 10}), "no subject"),
    (jwt({"sub": " ", "exp": 10}), "no subject"),
])
def test_unusable_tokens(token: str, text: str) -> None:
    with pytest.raises(TokenFormatError, match=text):
        parse_token(token)


def test_unsecured_token_as_kafka_builds_it() -> None:
    options = {"unsecuredLoginStringClaim_sub": "alice", "unsecuredLoginNumberClaim_level": "3",
               "unsecuredLoginListClaim_scope": ",read,write", "unsecuredLoginLifetimeSeconds": "60"}
    token = unsecured_token(options, now=1000.5)
    assert token.value.startswith("eyJhbGciOiJub25lIn0.") and token.value.endswith(".")
    assert jwt_claims(token.value) == {"iat": 1000, "exp": 1060, "sub": "alice", "level": 3,
                                       "scope": ["read", "write"]}
    assert (token.principal, token.lifetime, token.scope) == ("alice", 60.0, ("read", "write"))
    with pytest.raises(ValueError, match="unsecuredLoginStringClaim_sub"):
        unsecured_token({}, now=0)
    with pytest.raises(ValueError, match="unknown unsecured login option"):
        unsecured_token({"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginFooClaim_x": "1"}, now=0)


def test_refresh_times_follow_the_java_settings() -> None:
    policy = RefreshPolicy()  # 0.8, 0.05, 60 s, 300 s
    hour = AccessToken("t", "p", expires_at=3600, issued_at=0)
    assert policy.refresh_at(hour, now=0, rnd=0) == pytest.approx(2880)  # 80% of the lifetime
    assert policy.refresh_at(hour, now=0, rnd=0.999) == pytest.approx(3060, abs=1)  # + jitter, < buffer
    assert RefreshPolicy(window_factor=1.0).refresh_at(hour, now=0, rnd=0) == 3300  # the 300 s buffer
    assert RefreshPolicy(window_factor=0.5).refresh_at(hour, now=1790, rnd=0) == 1850  # min period 60 s
    short = AccessToken("t", "p", expires_at=1020, issued_at=1000)  # 20 s: both limits dropped
    assert policy.refresh_at(short, now=1000, rnd=0) == pytest.approx(1016)
    assert policy.refresh_at(short, now=1030, rnd=0) == 1030  # expired: now


def test_reauthentication_between_85_and_95_percent_and_a_second_before_the_end() -> None:
    hour = 3_600_000
    assert reauthentication_delay(hour, 0) == pytest.approx(3060)
    assert reauthentication_delay(hour, 0.999) == pytest.approx(3420, abs=1)
    # a short session keeps a second for a request queued behind a long-polling fetch
    assert reauthentication_delay(10_000, 0) == pytest.approx(8.5)
    assert reauthentication_delay(10_000, 0.999) == pytest.approx(9.0)
    assert reauthentication_delay(4_000, 0.5) == pytest.approx(3.0)
    # ... unless that is before half of it
    assert reauthentication_delay(1_600, 0.5) == pytest.approx(0.8)


# ---------------------------------------------------------------------------------- config


def oidc(**extra: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.login.callback.handler.class": HANDLER,
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.jaas.config": f'{MODULE} required clientId="mirror" clientSecret="{SECRET}" scope="kafka" '
                            'extension_logicalCluster="lkc-1";',
        **extra,
    }


def test_oidc_client_credentials_in_java_names() -> None:
    sec = parse_security(oidc(**{"sasl.oauthbearer.sub.claim.name": "azp",
                                 "sasl.login.refresh.buffer.seconds": "30",
                                 "sasl.login.connect.timeout.ms": "2500"}), "east")
    oauth = sec.oauth
    assert oauth is not None and sec.mechanism == "OAUTHBEARER" and sec.username == "mirror"
    assert (oauth.token_endpoint_url, oauth.client_id, oauth.client_secret, oauth.scope) == (
        "https://idp.example/token", "mirror", SECRET, "kafka")
    assert oauth.extensions == (("logicalCluster", "lkc-1"),) and oauth.sub_claim == "azp"
    assert oauth.refresh.buffer_s == 30 and oauth.connect_timeout_s == 2.5 and sec.ignored == ()
    auth: Any = sec.security_config().authenticator
    assert auth.mechanism == "OAUTHBEARER" and auth.tokens.settings == oauth
    assert SECRET not in repr(sec) + repr(oauth) + repr(auth) + repr(auth.tokens)


def test_kafka_4_1_client_credentials_keys_and_the_old_handler_package() -> None:
    props = oidc(**{"sasl.jaas.config": f"{MODULE} required;",
                    "sasl.oauthbearer.client.credentials.client.id": "m2",
                    "sasl.oauthbearer.client.credentials.client.secret": SECRET,
                    "sasl.oauthbearer.scope": "s2",
                    "sasl.login.callback.handler.class":
                        HANDLER.replace("oauthbearer.", "oauthbearer.secured.")})
    oauth = parse_security(props, "east").oauth
    assert oauth is not None and (oauth.client_id, oauth.client_secret, oauth.scope) == ("m2", SECRET, "s2")


def test_unsecured_login_for_development() -> None:
    jaas = f'{MODULE} required unsecuredLoginStringClaim_sub="alice";'
    sec = parse_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                          "sasl.jaas.config": jaas}, "east")
    assert sec.oauth is not None and sec.oauth.token_endpoint_url is None
    conf = sec.librdkafka()
    assert conf["sasl.mechanism"] == "OAUTHBEARER" and "sasl.username" not in conf
    value, _expiry, principal, extensions = conf["oauth_cb"]("")
    assert principal == "alice" and jwt_claims(value)["sub"] == "alice" and extensions == {}


@pytest.mark.parametrize(("change", "key", "text"), [
    ({"sasl.login.callback.handler.class": "com.example.MyHandler"}, "sasl.login.callback.handler.class",
     "cannot be used by mm2py"),
    ({"sasl.oauthbearer.token.endpoint.url": ""}, "sasl.oauthbearer.token.endpoint.url", "needs the token"),
    ({"sasl.oauthbearer.token.endpoint.url": "ldap://x"}, "sasl.oauthbearer.token.endpoint.url",
     "not an http"),
    ({"sasl.jaas.config": f'{MODULE} required clientId="m";'}, "sasl.jaas.config", "clientSecret"),
    ({"sasl.jaas.config": f'{MODULE} required clientId="m" clientSecret="{SECRET}" foo="1";'},
     "sasl.jaas.config", "foo are not supported"),
    ({"sasl.jaas.config": f'{MODULE} required clientId="m" clientSecret="{SECRET}" extension_auth="1";'},
     "sasl.jaas.config", "not allowed"),
    ({"sasl.login.refresh.window.factor": "0.3"}, "sasl.login.refresh.window.factor", "outside 0.5..1"),
    ({"sasl.oauthbearer.jwt.retriever.class": HANDLER.replace("OAuthBearerLoginCallbackHandler",
                                                               "JwtBearerJwtRetriever")},
     "sasl.oauthbearer.jwt.retriever.class", "not supported"),
    ({"sasl.login.callback.handler.class": ""}, "sasl.login.callback.handler.class", "unsecured one"),
])
def test_oauth_errors_name_their_key(change: dict[str, str], key: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_security(oidc(**change), "east")
    assert info.value.key == f"east.{key}" and text in str(info.value), str(info.value)
    assert SECRET not in str(info.value)


def test_gssapi_says_what_is_missing() -> None:
    with pytest.raises(ConfigError, match=r"GSSAPI \(Kerberos\) is not supported.*built without GSSAPI"):
        parse_security({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "east")


# ------------------------------------------------------------------------------ token cache


def test_provider_caches_refreshes_and_keeps_a_valid_token_when_a_refresh_fails(tmp_path: Path) -> None:
    clock = [1000.0]
    path = tmp_path / "token"
    path.write_text(jwt({"sub": "m", "iat": 1000, "exp": 1100}))
    provider = TokenProvider(OAuthSettings(token_endpoint_url=f"file://{path}", cluster="east"),
                             clock=lambda: clock[0], rnd=lambda: 0.0)
    first = provider.token()
    assert provider.token() is first and provider.cached() is first and provider.fetches == 1
    clock[0] = 1080.5  # past 80% of the lifetime: a new token
    path.write_text(jwt({"sub": "m", "iat": 1080, "exp": 1180}))
    second = provider.token()
    assert second.expires_at == 1180 and provider.fetches == 2
    path.unlink()
    clock[0] = 1170.0  # due again, the file is gone: the valid token stays, tried again later
    assert provider.token() is second and provider.cached() is second
    clock[0] = 1181.0  # expired and still no token: an error that says why
    with pytest.raises(TokenError, match=r"cannot read the OAUTHBEARER token file"):
        provider.token()


def test_a_session_takes_a_token_with_half_its_lifetime_left(tmp_path: Path) -> None:
    """A SASL session ends with the token it was opened with: a connection (re-)authenticates with
    a token that has at least half its lifetime left, though the cache keeps it till 80%."""
    clock = [1000.0]
    path = tmp_path / "token"
    path.write_text(jwt({"sub": "m", "iat": 1000, "exp": 1100}))
    provider = TokenProvider(OAuthSettings(token_endpoint_url=f"file://{path}", cluster="east"),
                             clock=lambda: clock[0], rnd=lambda: 0.0)
    first = asyncio.run(provider.current(fresh=0.5))
    clock[0] = 1049.0
    assert provider.cached(fresh=0.5) is first
    clock[0] = 1060.0  # 40 s of 100 left: not yet due for refresh, but too short for a session
    assert provider.cached() is first and provider.cached(fresh=0.5) is None
    path.write_text(jwt({"sub": "m", "iat": 1060, "exp": 1160}))
    second = asyncio.run(provider.current(fresh=0.5))
    assert second.expires_at == 1160 and provider.fetches == 2


def test_an_unreachable_endpoint_fails_at_once() -> None:
    provider = TokenProvider(OAuthSettings(token_endpoint_url="http://127.0.0.1:9/token", client_id="m",
                                           client_secret=SECRET, cluster="east"))
    with pytest.raises(TokenError) as info:
        provider.token()
    assert "cannot reach the token endpoint" in str(info.value) and SECRET not in str(info.value)


def test_no_garbage_collection_starts_inside_librdkafkas_token_callback(tmp_path: Path) -> None:
    """librdkafka runs ``oauth_cb`` on a thread of its own, and aborts the process when a client is
    destroyed there; a cyclic collection starting inside the callback could do that: the collector
    is off while the token is fetched, and as it was once the callback is over (the hold itself:
    tests/unit/test_gc_hold.py)."""
    import _thread
    import gc
    import threading

    path = tmp_path / "token"
    path.write_text(jwt({"sub": "m", "iat": 1000, "exp": 1100}))
    seen: list[bool] = []

    class Watching(TokenProvider):
        def _obtain(self, now: float) -> Any:
            seen.append(gc.isenabled())
            return super()._obtain(now)

    provider = Watching(OAuthSettings(token_endpoint_url=f"file://{path}", cluster="east"),
                        clock=lambda: 1000.0, rnd=lambda: 0.0)

    def on_librdkafkas_thread() -> tuple[str, float, str, dict[str, str]]:
        answers: list[tuple[str, float, str, dict[str, str]]] = []
        done = threading.Event()

        def call() -> None:  # a thread Python did not start, as librdkafka's
            answers.append(provider.librdkafka_token(""))
            done.set()

        _thread.start_new_thread(call, ())
        assert done.wait(30)
        return answers[0]

    def until_enabled() -> bool:
        pause = threading.Event()
        for _ in range(6000):
            if gc.isenabled():
                return True
            pause.wait(0.005)
        return False

    assert gc.isenabled()
    _value, expires, principal, _ = on_librdkafkas_thread()
    assert seen == [False] and principal == "m" and expires == 1100
    assert until_enabled()
    gc.disable()  # a process that turned it off keeps it off
    try:
        provider.librdkafka_token("")
        on_librdkafkas_thread()
        assert not gc.isenabled()
    finally:
        gc.enable()
