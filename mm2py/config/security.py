"""A cluster's TLS/SASL settings, given in MM2's (Java client) names, for both kinds of client.

MirrorMaker 2 users secure a cluster with the Java client's properties, e.g.::

    east.security.protocol = SASL_SSL
    east.sasl.mechanism = SCRAM-SHA-512
    east.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="alice" password="alice-secret";
    east.ssl.truststore.type = PEM
    east.ssl.truststore.location = /etc/kafka/ca.pem

:func:`cluster_security` reads them (as resolved for one client by ``FlowConfig.client_config``)
into a :class:`ClusterSecurity`, which gives the raw client's ``SecurityConfig``
(:meth:`ClusterSecurity.security_config`) and confluent-kafka's librdkafka properties
(:meth:`ClusterSecurity.librdkafka`). Supported: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; SASL
PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (:mod:`mm2py.config.oauth`: OIDC client
credentials or Kafka's unsecured tokens); PEM trust and key stores (files or inline),
``ssl.key.password`` for an encrypted key, ``ssl.endpoint.identification.algorithm`` (``https`` by
default, empty turns host name verification off). JKS/PKCS12 stores and GSSAPI are configuration
errors naming the key (:data:`GSSAPI_UNSUPPORTED` says why). Other ``ssl.*``/``sasl.*`` keys
(cipher suites, login tuning...) are reported as ignored.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mm2py.client.connection import SecurityConfig
from mm2py.client.oauth import OAuthSettings, token_provider
from mm2py.client.sasl import SaslAuthenticator
from mm2py.client.tls import TlsConfigError, TlsSettings, ssl_context
from mm2py.config.errors import ConfigError
from mm2py.config.models import FlowConfig
from mm2py.config.oauth import HANDLED_KEYS as OAUTH_KEYS
from mm2py.config.oauth import LOGIN_MODULE as OAUTH_MODULE
from mm2py.config.oauth import parse_oauth
from mm2py.protocol.sasl_mechanisms import MECHANISMS, OAUTHBEARER, PLAIN

__all__ = ["ClusterSecurity", "cluster_security", "parse_jaas_config", "parse_security"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM": "org.apache.kafka.common.security.scram.ScramLoginModule",
    OAUTHBEARER: OAUTH_MODULE,
}
_FLAGS = ("required", "requisite", "sufficient", "optional")
HANDLED_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates",
    "ssl.truststore.password",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.keystore.password", "ssl.key.password", "ssl.endpoint.identification.algorithm",
})
#: why ``sasl.mechanism=GSSAPI`` (Kerberos) is refused, and what it would take
GSSAPI_UNSUPPORTED = (
    "SASL mechanism GSSAPI (Kerberos) is not supported by mm2py: the confluent-kafka wheels from PyPI "
    "(its admin and store clients) are built without GSSAPI (librdkafka: 'No provider for SASL mechanism "
    "GSSAPI'), and its raw fetch/produce client has no Kerberos exchange; use OAUTHBEARER, SCRAM or PLAIN "
    "if the cluster offers one, and see README 'Kerberos (GSSAPI)' for what support would take"
)
Side = Literal["source", "target"]
Kind = Literal["consumer", "producer", "admin"]


@dataclass(frozen=True)
class ClusterSecurity:
    """How to connect to one cluster: protocol, SASL credentials, TLS material. Plain data."""

    cluster: str
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: TlsSettings | None = field(default=None, repr=False)
    #: OAUTHBEARER: where the tokens come from (``username`` is the OIDC client id, no password)
    oauth: OAuthSettings | None = field(default=None, repr=False)
    #: ssl.*/sasl.* keys present but without effect here (MM2 names, e.g. ``ssl.cipher.suites``)
    ignored: tuple[str, ...] = ()
    #: the MM2 key each setting came from, for error messages
    origins: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def security_config(self) -> SecurityConfig:
        """The raw client's connection security (builds the ``ssl.SSLContext`` now)."""
        context = None
        if self.tls is not None:
            try:
                context = ssl_context(self.tls)
            except TlsConfigError as e:
                key = self._tls_key(e.part)
                raise ConfigError(f"invalid value for {key!r}: {e}", key) from None
        authenticator = None
        if self.uses_sasl:
            assert self.mechanism and self.username is not None and self.password is not None
            tokens = token_provider(self.oauth) if self.oauth is not None else None
            authenticator = SaslAuthenticator(
                self.mechanism, self.username, self.password, cluster=self.cluster, tokens=tokens
            )
        return SecurityConfig(ssl_context=context, authenticator=authenticator, name=self.cluster)

    def _tls_key(self, part: str) -> str:
        wanted = (("ssl.truststore.location", "ssl.truststore.certificates") if part == "ca" else
                  ("ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key"))
        for key in wanted:
            if key in self.origins:
                return self.origins[key]
        return f"{self.cluster}.{wanted[0]}"

    def librdkafka(self) -> dict[str, Any]:
        """The same settings as librdkafka (confluent-kafka) properties. OAUTHBEARER gets an
        ``oauth_cb`` serving the process's token cache (the raw client's tokens, same endpoint
        trust), not librdkafka's own OIDC client; the token is had here first (from the cache, or
        fetched), so a refused client or an unreachable endpoint raises
        :class:`~mm2py.client.oauth.TokenError` with the endpoint's reason at once (confluent-kafka
        would only report that no token came within 10 s)."""
        conf: dict[str, Any] = {"security.protocol": self.protocol}
        if self.oauth is not None:
            tokens = token_provider(self.oauth)
            tokens.token()
            conf.update({"sasl.mechanism": OAUTHBEARER, "oauth_cb": tokens.librdkafka_token})
        elif self.uses_sasl:
            assert self.mechanism and self.username is not None and self.password is not None
            conf.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                         "sasl.password": self.password})
        tls = self.tls
        if tls is not None:
            if tls.ca_file:
                conf["ssl.ca.location"] = tls.ca_file
            elif tls.ca_pem:
                conf["ssl.ca.pem"] = tls.ca_pem
            else:
                conf["ssl.ca.location"] = "probe"  # the system's CA certificates, like Python's ssl
            if tls.cert_file:
                conf["ssl.certificate.location"] = tls.cert_file
                conf["ssl.key.location"] = tls.key_file or tls.cert_file
            elif tls.cert_pem:
                conf["ssl.certificate.pem"] = tls.cert_pem
                if tls.key_pem:
                    conf["ssl.key.pem"] = tls.key_pem
            if tls.key_password:
                conf["ssl.key.password"] = tls.key_password
            conf["ssl.endpoint.identification.algorithm"] = "https" if tls.check_hostname else "none"
        return conf


# ------------------------------------------------------------------------------------- JAAS


def parse_jaas_config(text: str) -> tuple[str, dict[str, str]]:
    """``<LoginModule class> <flag> key="value" ... ;`` -> (class, options). One module only, as Kafka.

    Raises ValueError with a message that never repeats option values (they hold passwords)."""
    tokens = _jaas_tokens(text)
    if len(tokens) < 3 or tokens[-1] != (";", False):
        raise ValueError("expected '<LoginModule class> required key=\"value\" ... ;'")
    module, flag = tokens[0], tokens[1]
    if module[1] or flag[1] or flag[0].lower() not in _FLAGS:
        raise ValueError(f"expected a login module class and a control flag ({'/'.join(_FLAGS)})")
    body = tokens[2:-1]
    if (";", False) in body:
        raise ValueError("only one login module may be configured")
    options: dict[str, str] = {}
    i = 0
    while i < len(body):
        if i + 2 >= len(body) or body[i + 1] != ("=", False) or body[i][1]:
            raise ValueError("options must be written key=\"value\"")
        options[body[i][0]] = body[i + 2][0]
        i += 3
    return module[0], options


def _jaas_tokens(text: str) -> list[tuple[str, bool]]:
    """Words, '=' and ';' as (text, quoted) pairs; quoted strings may escape with backslashes."""
    out: list[tuple[str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            out.append((c, False))
            i += 1
        elif c in "\"'":
            buf, i = [], i + 1
            while i < n and text[i] != c:
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                buf.append(text[i])
                i += 1
            if i >= n:
                raise ValueError("unterminated quoted value")
            out.append(("".join(buf), True))
            i += 1
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in "=;\"'":
                i += 1
            out.append((text[start:i], False))
    return out


# ----------------------------------------------------------------------------------- parsing


def parse_security(
    props: Mapping[str, str], cluster: str, origin: Callable[[str], str] | None = None
) -> ClusterSecurity:
    """Read MM2/Java security properties of one client. ``origin(key)`` names the MM2 key a
    property came from (default ``<cluster>.<key>``), so errors point at the line to fix."""
    name = origin or (lambda key: f"{cluster}.{key}")

    def fail(key: str, message: str) -> ConfigError:
        return ConfigError(f"invalid value for {name(key)!r}: {message}", name(key))

    def get(key: str) -> str | None:
        value = props.get(key)
        return None if value is None else str(value).strip()

    protocol = (get("security.protocol") or "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        expected = ", ".join(PROTOCOLS)
        raise fail("security.protocol", f"{props['security.protocol']!r} (expected one of {expected})")
    keys = [k for k in props if k.startswith(("ssl.", "sasl."))]
    origins = {k: name(k) for k in keys}
    tls = _tls(get, fail) if protocol in ("SSL", "SASL_SSL") else None
    mechanism = username = password = None
    oauth: OAuthSettings | None = None
    if protocol.startswith("SASL_"):
        mechanism, username, password, oauth = _sasl(get, fail, protocol, _endpoint_trust(get, tls), cluster)
    handled = HANDLED_KEYS | OAUTH_KEYS if oauth is not None else HANDLED_KEYS
    ignored = tuple(sorted(k for k in keys if k not in handled))
    security = ClusterSecurity(cluster, protocol, mechanism, username, password, tls, oauth, ignored, origins)
    if tls is not None:
        security.security_config()  # loads the certificates and keys now: errors name the key
    return security


def _endpoint_trust(get: Callable[[str], str | None], tls: TlsSettings | None) -> TlsSettings | None:
    """The CAs an OAUTHBEARER token endpoint is verified with: the cluster's trust settings."""
    if tls is not None:
        return TlsSettings(ca_file=tls.ca_file, ca_pem=tls.ca_pem, check_hostname=tls.check_hostname)
    ca_file, ca_pem = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    return TlsSettings(ca_file=ca_file, ca_pem=ca_pem) if ca_file or ca_pem else None


def _sasl(
    get: Callable[[str], str | None], fail: Callable[[str, str], ConfigError], protocol: str,
    trust: TlsSettings | None, cluster: str,
) -> tuple[str, str, str, OAuthSettings | None]:
    mechanism = (get("sasl.mechanism") or "").upper()
    supported = ", ".join(MECHANISMS)
    if not mechanism:
        raise fail("sasl.mechanism", f"security.protocol is {protocol} but no sasl.mechanism is set "
                                     f"(the Java default is GSSAPI: {GSSAPI_UNSUPPORTED}; use one of "
                                     f"{supported})")
    if mechanism == "GSSAPI":
        raise fail("sasl.mechanism", f"{GSSAPI_UNSUPPORTED} (supported: {supported})")
    if mechanism not in MECHANISMS:
        raise fail("sasl.mechanism", f"SASL mechanism {mechanism} is not supported (supported: {supported})")
    family = mechanism if mechanism in (PLAIN, OAUTHBEARER) else "SCRAM"
    jaas = get("sasl.jaas.config")
    if not jaas:
        example = ('unsecuredLoginStringClaim_sub="..."' if mechanism == OAUTHBEARER
                   else 'username="..." password="..."')
        raise fail("sasl.jaas.config", f"{mechanism} needs the login module in sasl.jaas.config, e.g. "
                                       f"{_LOGIN_MODULES[family]} required {example};")
    try:
        module, options = parse_jaas_config(jaas)
    except ValueError as e:
        raise fail("sasl.jaas.config", str(e)) from None
    expected = _LOGIN_MODULES[family]
    if module != expected:
        raise fail("sasl.jaas.config", f"sasl.mechanism {mechanism} needs login module {expected}, "
                                       f"not {module}")
    if mechanism == OAUTHBEARER:
        oauth = parse_oauth(get, fail, options, trust, cluster)
        return mechanism, oauth.client_id, "", oauth
    missing = [k for k in ("username", "password") if k not in options]
    if missing:
        raise fail("sasl.jaas.config", f"the login module options lack {' and '.join(missing)}")
    return mechanism, options["username"], options["password"], None


def _tls(get: Callable[[str], str | None], fail: Callable[[str, str], ConfigError]) -> TlsSettings:
    def readable(key: str) -> str:
        path = get(key)
        assert path is not None
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise fail(key, f"no readable file {path!r}")
        return path

    def pem_only(store: str, location: str) -> None:
        store_type = (get(f"ssl.{store}.type") or "JKS").upper()
        if store_type != "PEM":
            raise fail(f"ssl.{store}.type",
                       f"{store} type {store_type} cannot be read by mm2py (Python's ssl and librdkafka read "
                       f"PEM); convert the {store} to PEM and set ssl.{store}.type=PEM and {location}")
        if get(f"ssl.{store}.password"):
            raise fail(f"ssl.{store}.password", f"a PEM {store} has no store password (as in Java)"
                       + ("; an encrypted key's password is ssl.key.password" if store == "keystore" else ""))

    ca_file = ca_pem = None
    if get("ssl.truststore.location") and get("ssl.truststore.certificates"):
        raise fail("ssl.truststore.certificates",
                   "set ssl.truststore.location or ssl.truststore.certificates, not both")
    if get("ssl.truststore.location"):
        pem_only("truststore", "ssl.truststore.location")
        ca_file = readable("ssl.truststore.location")
    elif get("ssl.truststore.certificates"):
        ca_pem = get("ssl.truststore.certificates")
    elif get("ssl.truststore.password"):
        raise fail("ssl.truststore.password", "a trust store password without a trust store")

    cert_file = cert_pem = key_pem = None
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    if get("ssl.keystore.location") and (chain or key):
        raise fail("ssl.keystore.location", "set ssl.keystore.location or ssl.keystore.certificate.chain "
                                            "with ssl.keystore.key, not both")
    if get("ssl.keystore.location"):
        pem_only("keystore", "ssl.keystore.location (private key and certificate chain in one PEM file)")
        cert_file = readable("ssl.keystore.location")
    elif chain or key:
        if not (chain and key):
            missing = "ssl.keystore.key" if chain else "ssl.keystore.certificate.chain"
            raise fail(missing, "ssl.keystore.certificate.chain and ssl.keystore.key go together")
        pem_only("keystore", "ssl.keystore.certificate.chain with ssl.keystore.key")
        cert_pem, key_pem = chain, key
    elif get("ssl.keystore.password"):
        raise fail("ssl.keystore.password", "a key store password without a key store")

    algorithm = get("ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.lower() not in ("https", ""):
        raise fail("ssl.endpoint.identification.algorithm", f"{algorithm!r} (expected 'https', or empty to "
                                                            "turn host name verification off)")
    return TlsSettings(
        ca_file=ca_file, ca_pem=ca_pem, cert_file=cert_file, cert_pem=cert_pem, key_pem=key_pem,
        key_password=get("ssl.key.password") or None, check_hostname=algorithm is None or algorithm != "",
    )


# ----------------------------------------------------------------------------- flow helpers


def key_origin(flow: FlowConfig, side: Side, kind: Kind) -> Callable[[str], str]:
    """Names the MM2 key a resolved client property of ``flow``'s ``side`` came from (highest
    precedence first, as ``FlowConfig.client_config`` resolves them)."""
    cluster = flow.source_cluster if side == "source" else flow.target_cluster
    overrides = flow.client_overrides

    def origin(key: str) -> str:
        if key in overrides.get(f"{side}.{kind}", {}):
            return f"{flow.name}.{side}.{kind}.{key}"
        if key in getattr(cluster, kind):
            return f"{cluster.alias}.{kind}.{key}"
        if key in overrides.get(kind, {}):
            return f"{kind}.{key}"
        if key in overrides.get(f"{side}.cluster", {}):
            return f"{flow.name}.{side}.cluster.{key}"
        return f"{cluster.alias}.{key}"

    return origin


def cluster_security(flow: FlowConfig, side: Side, kind: Kind = "admin") -> ClusterSecurity:
    """The security settings one client of ``flow``'s ``side`` uses (validated; ConfigError names the key)."""
    alias = flow.source if side == "source" else flow.target
    return parse_security(flow.client_config(side, kind), alias, key_origin(flow, side, kind))
