"""The REST API's listeners and security, read from the worker's configuration with Kafka Connect's
keys (and a few of mm2py's own, all under ``mm2py.rest.``).

Connect's keys, read as Connect's worker reads them:

- ``listeners``: a comma list of ``http://host:port`` and ``https://host:port`` (an empty host binds
  every interface, ``[::1]`` an IPv6 address; port 0 picks a free one);
- ``listeners.https.ssl.*``: the HTTPS listeners' TLS settings. As Connect's
  ``valuesWithPrefixAllOrNothing``: when any ``listeners.https.`` key is present, only the prefixed
  keys are read (a key left out takes its default, not the worker's value); when none is, the
  worker's own ``ssl.*`` keys are;
- ``rest.extension.classes``: ``org.apache.kafka.connect.rest.basic.auth.extension.
  BasicAuthSecurityRestExtension`` turns on Basic authentication, its JAAS file named by
  ``-Djava.security.auth.login.config=<file>`` in ``KAFKA_OPTS`` (or ``--rest-jaas-config``).

mm2py's additions: ``mm2py.rest.read.only.users`` (callers who may read but not change),
``mm2py.rest.jwt.*`` (bearer tokens checked against an OIDC issuer's JWKS).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from mm2py.config.errors import ConfigError
from mm2py.config.filters import split_list

__all__ = [
    "BASIC_AUTH_EXTENSION", "JAAS_PROPERTY", "JwtSettings", "Listener", "RestSettings", "TlsSettings",
    "jaas_file_from_kafka_opts", "rest_settings",
]

BASIC_AUTH_EXTENSION = "org.apache.kafka.connect.rest.basic.auth.extension.BasicAuthSecurityRestExtension"
#: the JVM system property that names the JAAS file (Connect's worker reads it from KAFKA_OPTS)
JAAS_PROPERTY = "java.security.auth.login.config"
_HTTPS_PREFIX = "listeners.https."
#: Connect's listener syntax: scheme://host:port, an IPv6 host in brackets, the host may be empty
_LISTENER = re.compile(r"^(?P<scheme>[A-Za-z]+)://\[?(?P<host>[0-9A-Za-z\-%._:]*)\]?:(?P<port>-?[0-9]+)$")


class Listener(BaseModel):
    """One address the API is served on."""

    model_config = ConfigDict(frozen=True)

    scheme: Literal["http", "https"]
    host: str
    port: int = Field(ge=0, le=65535)

    @property
    def loopback(self) -> bool:
        """Reached only from this machine."""
        return self.host in ("localhost", "::1") or self.host.startswith("127.")

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port if port is None else port}"


class TlsSettings(BaseModel):
    """An HTTPS listener's TLS settings, under Connect's names (``ssl.*``, prefix removed)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    keystore_type: str | None = Field(None, alias="ssl.keystore.type")
    keystore_location: str | None = Field(None, alias="ssl.keystore.location")
    keystore_password: SecretStr | None = Field(None, alias="ssl.keystore.password")
    key_password: SecretStr | None = Field(None, alias="ssl.key.password")
    #: PEM key and certificate chain given inline (KIP-651)
    keystore_key: SecretStr | None = Field(None, alias="ssl.keystore.key")
    keystore_certificate_chain: str | None = Field(None, alias="ssl.keystore.certificate.chain")
    truststore_type: str | None = Field(None, alias="ssl.truststore.type")
    truststore_location: str | None = Field(None, alias="ssl.truststore.location")
    truststore_password: SecretStr | None = Field(None, alias="ssl.truststore.password")
    truststore_certificates: str | None = Field(None, alias="ssl.truststore.certificates")
    client_auth: Literal["none", "requested", "required"] = Field("none", alias="ssl.client.auth")
    enabled_protocols: str = Field("TLSv1.2,TLSv1.3", alias="ssl.enabled.protocols")
    cipher_suites: str | None = Field(None, alias="ssl.cipher.suites")
    #: where these came from: ``listeners.https.`` or the worker's ``ssl.*`` (for messages)
    prefix: str = ""

    def key(self, name: str) -> str:
        """The configuration key a setting was read from, e.g. ``listeners.https.ssl.keystore.location``."""
        return self.prefix + name


class JwtSettings(BaseModel):
    """Bearer tokens (JWT) checked against an OIDC issuer's keys (mm2py's addition)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    jwks_url: str = Field(alias="mm2py.rest.jwt.jwks.url")
    issuer: str | None = Field(None, alias="mm2py.rest.jwt.issuer")
    audience: str | None = Field(None, alias="mm2py.rest.jwt.audience")
    #: the claim that names the caller
    principal_claim: str = Field("sub", alias="mm2py.rest.jwt.principal.claim")
    #: a token whose claim of this name is true may read but not change
    read_only_claim: str = Field("mm2py_read_only", alias="mm2py.rest.jwt.read.only.claim")
    #: a CA file (PEM) to verify an https JWKS endpoint with (default: the system's)
    ca_location: str | None = Field(None, alias="mm2py.rest.jwt.jwks.ca.location")
    #: seconds the keys are kept before they are read again (an unknown key id reads them at once)
    jwks_cache_seconds: int = Field(300, alias="mm2py.rest.jwt.jwks.cache.seconds", ge=1)
    #: an unknown key id reads the keys again at most this often (a flood of forged key ids does not
    #: become a flood of requests to the issuer)
    jwks_refresh_cooldown_seconds: float = Field(
        30, alias="mm2py.rest.jwt.jwks.refresh.cooldown.seconds", ge=0)


class RestSettings(BaseModel):
    """Where and how the REST API is served."""

    model_config = ConfigDict(frozen=True)

    listeners: tuple[Listener, ...]
    #: the HTTPS listeners' TLS settings (None when every listener is plain HTTP)
    tls: TlsSettings | None = None
    #: Connect's Basic authentication: the JAAS file (None: off)
    jaas_file: str | None = None
    jwt: JwtSettings | None = None
    read_only_users: frozenset[str] = frozenset()
    #: ``--rest-read-only``: nobody may change anything
    read_only: bool = False

    @property
    def authenticates(self) -> bool:
        """Every caller proves who they are (a password, a token, or a client certificate)."""
        client_certs = self.tls is not None and self.tls.client_auth == "required"
        only_https = all(listener.scheme == "https" for listener in self.listeners)
        return self.jaas_file is not None or self.jwt is not None or (client_certs and only_https)


def parse_listeners(value: Any) -> tuple[Listener, ...]:
    """Connect's ``listeners`` value (a comma list or a YAML list) as listeners."""
    out = []
    for item in split_list(value) if isinstance(value, str) else [str(v).strip() for v in value]:
        match = _LISTENER.match(item)
        if match is None:
            raise ConfigError(f"listeners: {item!r} is not scheme://host:port (e.g. https://0.0.0.0:8443)",
                              "listeners")
        scheme = match["scheme"].lower()
        if scheme not in ("http", "https"):
            raise ConfigError(f"listeners: {item!r}: the scheme must be http or https", "listeners")
        port = int(match["port"])
        if not 0 <= port <= 65535:
            raise ConfigError(f"listeners: {item!r}: the port must be 0 to 65535", "listeners")
        out.append(Listener(scheme="https" if scheme == "https" else "http", host=match["host"] or "0.0.0.0",
                            port=port))
    return tuple(out)


def tls_settings(keys: Mapping[str, Any]) -> TlsSettings:
    """The HTTPS listeners' TLS settings, all or nothing as Connect reads them: the
    ``listeners.https.`` keys when there is one, else the worker's ``ssl.*`` keys."""
    prefixed = {k[len(_HTTPS_PREFIX):]: v for k, v in keys.items() if k.startswith(_HTTPS_PREFIX)}
    prefix = _HTTPS_PREFIX if prefixed else ""
    chosen = prefixed or {k: v for k, v in keys.items() if k.startswith("ssl.")}
    values = {k: str(v).strip() for k, v in chosen.items() if k.startswith("ssl.") and v is not None}
    values = {k: v for k, v in values.items() if v != ""}
    if "ssl.client.auth" in values:
        values["ssl.client.auth"] = values["ssl.client.auth"].lower()
    try:
        return TlsSettings.model_validate({**values, "prefix": prefix})
    except ValidationError as exc:
        error = exc.errors()[0]
        key = prefix + str(error["loc"][0])
        raise ConfigError(f"{key}: {error['msg']}", key) from None


def jaas_file_from_kafka_opts(kafka_opts: str | None) -> str | None:
    """The JAAS file named by ``-Djava.security.auth.login.config=<file>`` in ``KAFKA_OPTS``."""
    found = None
    for word in shlex.split(kafka_opts or ""):
        if word.startswith(f"-D{JAAS_PROPERTY}="):
            found = word.split("=", 1)[1].strip()
    return found or None


def rest_settings(
    keys: Mapping[str, Any], *, rest_host: str = "127.0.0.1", rest_port: int = 0,
    jaas_config: str | None = None, kafka_opts: str | None = None, read_only: bool = False,
) -> RestSettings | None:
    """The REST API's settings from the worker's flat configuration ``keys`` and ``mm2py run``'s
    flags (``--rest-port``/``--rest-host``: one more plain listener); None when there is no listener."""
    listeners = list(parse_listeners(keys["listeners"])) if keys.get("listeners") else []
    if rest_port:
        listeners.append(Listener(scheme="http", host=rest_host, port=rest_port))
    if not listeners:
        return None
    tls = tls_settings(keys) if any(listener.scheme == "https" for listener in listeners) else None
    extensions = split_list(str(keys.get("rest.extension.classes", "")))
    unknown = [name for name in extensions if name != BASIC_AUTH_EXTENSION]
    if unknown:
        raise ConfigError(f"rest.extension.classes: mm2py runs no Java REST extension but Connect's Basic "
                          f"authentication ({BASIC_AUTH_EXTENSION}); not {', '.join(unknown)}",
                          "rest.extension.classes")
    jaas_file = None
    if extensions:
        jaas_file = jaas_config or jaas_file_from_kafka_opts(kafka_opts)
        if jaas_file is None:
            raise ConfigError(f"rest.extension.classes names {BASIC_AUTH_EXTENSION}, which needs a JAAS "
                              f"file: set KAFKA_OPTS=-D{JAAS_PROPERTY}=<file> or pass "
                              "--rest-jaas-config <file>",
                              "rest.extension.classes")
    elif jaas_config:
        raise ConfigError("--rest-jaas-config is read only with rest.extension.classes="
                          f"{BASIC_AUTH_EXTENSION} (as Connect's worker)", "rest.extension.classes")
    jwt = _jwt_settings(keys)
    users = frozenset(split_list(str(keys.get("mm2py.rest.read.only.users", ""))))
    return RestSettings(listeners=tuple(listeners), tls=tls, jaas_file=jaas_file, jwt=jwt,
                        read_only_users=users, read_only=read_only)


def _jwt_settings(keys: Mapping[str, Any]) -> JwtSettings | None:
    values = {k: str(v).strip() for k, v in keys.items() if k.startswith("mm2py.rest.jwt.")}
    if not values:
        return None
    known = {str(field.alias) for field in JwtSettings.model_fields.values()}
    for key in values:
        if key not in known:
            raise ConfigError(f"unknown key {key!r} (mm2py.rest.jwt.* keys: {', '.join(sorted(known))})", key)
    if not values.get("mm2py.rest.jwt.jwks.url"):
        raise ConfigError("mm2py.rest.jwt.* is set but not mm2py.rest.jwt.jwks.url, the issuer's keys",
                          "mm2py.rest.jwt.jwks.url")
    try:
        return JwtSettings.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0])
        raise ConfigError(f"{key}: {error['msg']}", key) from None

