"""``sasl.mechanism=OAUTHBEARER`` in the Java client's names, read into :class:`OAuthSettings`.

Two logins, as in Kafka:

- OIDC client credentials (KIP-768)::

      east.sasl.mechanism = OAUTHBEARER
      east.sasl.login.callback.handler.class = \\
          org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler
      east.sasl.oauthbearer.token.endpoint.url = https://idp.example.com/oauth2/token
      east.sasl.jaas.config = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \\
          clientId="mirror" clientSecret="..." scope="kafka" extension_logicalCluster="lkc-abc";

  (the ``secured.`` package name of Kafka before 4.0 is accepted too; so are Kafka 4.1's
  ``sasl.oauthbearer.client.credentials.client.id``/``.client.secret`` and ``sasl.oauthbearer.scope``
  in place of the JAAS options). ``sasl.oauthbearer.sub.claim.name``/``scope.claim.name`` name the
  token's claims, ``sasl.login.refresh.*`` when it is refreshed, ``sasl.login.connect.timeout.ms``
  and ``sasl.login.read.timeout.ms`` bound the endpoint's answer, ``sasl.oauthbearer.header.urlencode``
  URL-encodes the credentials. A ``file:`` token endpoint URL names a file holding the token.
- Kafka's unsecured tokens (no callback handler): ``OAuthBearerLoginModule required
  unsecuredLoginStringClaim_sub="alice";`` (development and tests only).

Custom login callback handlers and retrievers (Java classes) and the JWT-bearer assertion grant are
configuration errors naming the key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from mm2py.client.oauth import OAuthSettings
from mm2py.client.tls import TlsSettings
from mm2py.config.errors import ConfigError
from mm2py.protocol.oauthbearer import (
    UNSECURED_PREFIX,
    RefreshPolicy,
    check_extensions,
    unsecured_extensions,
    unsecured_token,
)

__all__ = ["HANDLED_KEYS", "LOGIN_MODULE", "parse_oauth"]

LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_PACKAGE = "org.apache.kafka.common.security.oauthbearer."
_OIDC_HANDLERS = (f"{_PACKAGE}OAuthBearerLoginCallbackHandler",
                  f"{_PACKAGE}secured.OAuthBearerLoginCallbackHandler")
_UNSECURED_HANDLER = f"{_PACKAGE}internals.unsecured.OAuthBearerUnsecuredLoginCallbackHandler"
_RETRIEVERS = tuple(f"{_PACKAGE}{c}" for c in ("DefaultJwtRetriever", "ClientCredentialsJwtRetriever",
                                                 "FileJwtRetriever"))
#: (key, default, low, high) of the refresh settings, Java's ranges
_REFRESH = (
    ("sasl.login.refresh.window.factor", 0.8, 0.5, 1.0),
    ("sasl.login.refresh.window.jitter", 0.05, 0.0, 0.25),
    ("sasl.login.refresh.min.period.seconds", 60.0, 0.0, 900.0),
    ("sasl.login.refresh.buffer.seconds", 300.0, 0.0, 3600.0),
)
HANDLED_KEYS = frozenset({
    "sasl.login.callback.handler.class", "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.client.credentials.client.id", "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.scope", "sasl.oauthbearer.header.urlencode", "sasl.oauthbearer.jwt.retriever.class",
    "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms", *(k for k, *_ in _REFRESH),
})

Get = Callable[[str], "str | None"]
Fail = Callable[[str, str], ConfigError]


def _number(get: Get, fail: Fail, key: str, default: float, low: float, high: float) -> float:
    text = get(key)
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        raise fail(key, f"{text!r} is not a number") from None
    if not low <= value <= high:
        raise fail(key, f"{text} is outside {low:g}..{high:g}")
    return value


def _login_kind(get: Get, fail: Fail) -> str:
    handler = get("sasl.login.callback.handler.class")
    retriever = get("sasl.oauthbearer.jwt.retriever.class")
    if retriever and retriever not in _RETRIEVERS:
        raise fail("sasl.oauthbearer.jwt.retriever.class",
                   f"{retriever} is not supported by mm2py (Java classes cannot be loaded; supported: "
                   "the default, client credentials and file retrievers)")
    if not handler or handler == _UNSECURED_HANDLER:
        if get("sasl.oauthbearer.token.endpoint.url"):
            raise fail("sasl.login.callback.handler.class",
                       "sasl.oauthbearer.token.endpoint.url is set but the login callback handler is the "
                       f"unsecured one; set sasl.login.callback.handler.class={_OIDC_HANDLERS[0]}")
        return "unsecured"
    if handler not in _OIDC_HANDLERS:
        raise fail("sasl.login.callback.handler.class",
                   f"{handler} cannot be used by mm2py (a Java class); OAUTHBEARER logins supported: "
                   f"{_OIDC_HANDLERS[0]} (OIDC client credentials) or none (unsecured tokens)")
    return "oidc"


def _unsecured(fail: Fail, options: Mapping[str, str], refresh: RefreshPolicy, cluster: str) -> OAuthSettings:
    unknown = [k for k in options if not k.startswith(UNSECURED_PREFIX)]
    if unknown:
        raise fail("sasl.jaas.config", f"option(s) {', '.join(sorted(unknown))} mean nothing to the "
                                       "unsecured login (no sasl.login.callback.handler.class is set)")
    try:
        unsecured_token(options, time.time())
        check_extensions(unsecured_extensions(options))
    except ValueError as e:
        raise fail("sasl.jaas.config", str(e)) from None
    return OAuthSettings(unsecured=tuple(sorted(options.items())), refresh=refresh, cluster=cluster,
                         extensions=tuple(sorted(unsecured_extensions(options).items())))


def parse_oauth(get: Get, fail: Fail, options: Mapping[str, str], trust: TlsSettings | None,
                cluster: str) -> OAuthSettings:
    """OAUTHBEARER settings from the client properties and the login module's options."""
    refresh = RefreshPolicy(*(_number(get, fail, *spec) for spec in _REFRESH))
    if _login_kind(get, fail) == "unsecured":
        return _unsecured(fail, options, refresh, cluster)
    url = get("sasl.oauthbearer.token.endpoint.url")
    if not url:
        raise fail("sasl.oauthbearer.token.endpoint.url", "the OIDC login needs the token endpoint URL")
    if not url.startswith(("https://", "http://", "file:")):
        raise fail("sasl.oauthbearer.token.endpoint.url", f"{url!r} is not an http(s) or file URL")
    client_id = get("sasl.oauthbearer.client.credentials.client.id") or options.get("clientId", "")
    secret = get("sasl.oauthbearer.client.credentials.client.secret") or options.get("clientSecret", "")
    if not url.startswith("file:") and not (client_id and secret):
        raise fail("sasl.jaas.config", "the OIDC login needs clientId and clientSecret (login module "
                                       "options, or sasl.oauthbearer.client.credentials.client.id/.secret)")
    extensions = {k.removeprefix("extension_"): v for k, v in options.items() if k.startswith("extension_")}
    try:
        check_extensions(extensions)
    except ValueError as e:
        raise fail("sasl.jaas.config", str(e)) from None
    known = {"clientId", "clientSecret", "scope"}
    unknown = sorted(k for k in options if k not in known and not k.startswith("extension_"))
    if unknown:
        raise fail("sasl.jaas.config", f"login module option(s) {', '.join(unknown)} are not supported "
                                       "(known: clientId, clientSecret, scope, extension_<name>)")
    timeouts = [_number(get, fail, k, 10_000, 1, 3_600_000) / 1000
                for k in ("sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms")]
    return OAuthSettings(
        token_endpoint_url=url, client_id=client_id, client_secret=secret,
        scope=get("sasl.oauthbearer.scope") or options.get("scope") or None,
        extensions=tuple(sorted(extensions.items())),
        sub_claim=get("sasl.oauthbearer.sub.claim.name") or "sub",
        scope_claim=get("sasl.oauthbearer.scope.claim.name") or "scope",
        refresh=refresh, connect_timeout_s=timeouts[0], read_timeout_s=timeouts[1],
        header_urlencode=(get("sasl.oauthbearer.header.urlencode") or "false").lower() == "true",
        trust=trust, cluster=cluster,
    )
