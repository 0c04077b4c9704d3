"""A ``KafkaMirrorMaker2`` cluster's connection as MM2's cluster keys (``<alias>.security.protocol``,
``<alias>.ssl.*``, ``<alias>.sasl.*``, ``<alias>.consumer.*``...), with Secrets read from a directory
laid out as Kubernetes mounts them (``<dir>/<secretName>/<key>``), as Strimzi's operator does:

* ``tls`` present: SSL (SASL_SSL with SASL); ``tls.trustedCertificates`` (``certificate`` or a glob
  ``pattern`` in the secret): a PEM trust store, ``ssl.truststore.location`` for one file, the
  certificates inline (``ssl.truststore.certificates``) for several;
* ``authentication``: ``tls`` (client certificate and key, inline PEM), ``scram-sha-256``/``-512``
  and ``plain`` (``sasl.jaas.config`` with the password read from its secret), ``oauth`` (v1beta2:
  client credentials or an access token; what mm2py's OAUTHBEARER login cannot do is an error or a
  note), ``custom`` (its ``sasl.*``/``ssl.keystore.*`` config, ``sasl: true`` for SASL);
* ``config``: connection keys as they are, ``consumer.*``/``producer.*``/``admin.*`` per client,
  Kafka Connect worker keys noted as ignored, any other key to each client of the cluster (MM2 hands
  a cluster's settings to all its clients).

Config values may name a secret as Strimzi's config provider does: ``${strimzisecrets:<namespace>/
<secret>:<key>}`` (``${secrets:...}`` too); other placeholders are an error.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mm2py.config.errors import ConfigError, did_you_mean
from mm2py.config.flat import CLIENT_KINDS, is_connection_key, to_client_value
from mm2py.config.oauth import LOGIN_MODULE as OAUTH_MODULE

__all__ = ["Mapped", "Secrets", "cluster_keys"]

_MODULES = {"plain": "org.apache.kafka.common.security.plain.PlainLoginModule",
            "scram": "org.apache.kafka.common.security.scram.ScramLoginModule"}
_OIDC_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_.-]+):([^}]*)\}")
#: Kafka Connect worker settings a cluster's config may carry (besides flat.py's ignored ones)
_WORKER_KEYS = ("group.id", "plugin.discovery", "plugin.path", "connector.client.config.override.policy",
                "config.storage.", "offset.storage.topic", "status.storage.", "key.converter",
                "value.converter", "header.converter", "config.providers", "offset.flush.", "rest.",
                "listeners", "session.key.", "inter.worker.", "scheduled.rebalance.", "task.shutdown.",
                "worker.", "heartbeat.interval.ms", "rebalance.timeout.ms", "metric.reporters",
                "exactly.once.source.support", "topic.creation.enable", "connect.protocol")
#: the target's settings of Connect's offsets topic that mm2py's progress topic takes
PROGRESS_KEYS = ("offset.storage.replication.factor", "offset.storage.partitions")
_AUTH_FIELDS = {
    "tls": {"certificateAndKey"},
    "scram-sha-256": {"username", "passwordSecret"}, "scram-sha-512": {"username", "passwordSecret"},
    "plain": {"username", "passwordSecret"}, "custom": {"sasl", "config"},
}
_OAUTH_UNSUPPORTED = {
    "refreshToken": "the refresh-token grant", "clientAssertion": "client assertions",
    "clientAssertionLocation": "client assertions", "passwordSecret": "the password grant",
    "username": "the password grant",
}
_OAUTH_NOTES = {
    "audience": "mm2py's client-credentials request sends no audience",
    "accessTokenIsJwt": "mm2py reads the token's expiry from the JWT when it is one",
    "maxTokenExpirySeconds": "mm2py refreshes tokens by sasl.login.refresh.* (Kafka's defaults)",
    "httpRetries": "mm2py retries a failed token request at the next refresh",
    "httpRetryPauseMs": "mm2py retries a failed token request at the next refresh",
    "enableMetrics": "OAuth metrics of Strimzi's Java library", "includeAcceptHeader": "always sent",
    "clientAssertionType": "client assertions are not supported",
    "disableTlsHostnameVerification": "the token endpoint is verified like the cluster "
                                      "(ssl.endpoint.identification.algorithm in its config)",
}


@dataclass
class Mapped:
    """Flat MM2 keys being built, each with the resource path it came from, and the notes."""

    keys: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def put(self, key: str, value: Any, origin: str) -> None:
        """Set ``key``; the same key set differently from two places is an error naming both."""
        if key in self.keys and _norm(self.keys[key]) != _norm(value):
            raise ConfigError(f"{self.origins[key]} and {origin} set {key!r} differently "
                              f"({_shown(key, self.keys[key])} and {_shown(key, value)})", origin)
        self.keys.setdefault(key, value)
        self.origins.setdefault(key, origin)

    def note(self, path: str, reason: str) -> None:
        self.notes.append(f"{path}: ignored: {reason}")


def _norm(value: Any) -> str:
    """A value as compared: ``False``, ``"false"`` and ``"FALSE"`` alike, ``-1`` and ``"-1"`` too."""
    try:
        text = to_client_value("", value)
    except ConfigError:
        return repr(value)
    return text.lower() if text.lower() in ("true", "false") else text


def _shown(key: str, value: Any) -> str:
    return "(hidden)" if re.search(r"password|secret|jaas|keystore\.key", key, re.I) else repr(value)


class Secrets:
    """Kubernetes Secrets mounted under one directory: ``<dir>/<secretName>/<key>``."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def file(self, secret: str, key: str, path: str) -> Path:
        found = self.directory / secret / key
        if "/" in secret or secret in ("", ".", "..") or ".." in Path(key).parts:
            raise ConfigError(f"{path}: invalid secret name {secret!r} or key {key!r}", path)
        if not found.is_file():
            raise ConfigError(f"{path}: secret {secret!r} has no key {key!r}: no file {str(found)!r} (the "
                              "secrets directory is MM2PY_SECRETS_DIR or load_config's secrets_dir)", path)
        return found

    def read(self, secret: str, key: str, path: str) -> str:
        try:
            return self.file(secret, key, path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read secret {secret!r} key {key!r}: {exc}", path) from None

    def matching(self, secret: str, pattern: str, path: str) -> list[Path]:
        folder = self.directory / secret
        found = sorted(p for p in folder.glob("*") if not p.name.startswith(".") and p.is_file()
                       and fnmatch.fnmatch(p.name, pattern)) if folder.is_dir() else []
        if not found:
            raise ConfigError(f"{path}: no file of secret {secret!r} matches {pattern!r} in "
                              f"{str(folder)!r}", path)
        return found

    def resolve(self, value: Any, path: str) -> Any:
        """``${strimzisecrets:<namespace>/<secret>:<key>}`` placeholders in ``value`` replaced."""
        if not isinstance(value, str) or "${" not in value:
            return value

        def one(match: re.Match[str]) -> str:
            provider, body = match.groups()
            ref = re.fullmatch(r"(?:[^/:]+/)?([^/:]+):(.+)", body)
            if provider not in ("strimzisecrets", "secrets") or ref is None:
                raise ConfigError(f"{path}: cannot resolve {match.group(0)!r}: mm2py resolves only "
                                  "${strimzisecrets:<namespace>/<secret>:<key>} (from its secrets "
                                  "directory)", path)
            return self.read(ref.group(1), ref.group(2), path).strip()

        return _PLACEHOLDER.sub(one, value)


def _required(body: Mapping[str, Any], names: tuple[str, ...], path: str) -> None:
    for name in names:
        if body.get(name) in (None, ""):
            raise ConfigError(f"{path}.{name}: required", f"{path}.{name}")


def _jaas(module: str, options: Mapping[str, str]) -> str:
    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return " ".join([module, "required", *(f"{k}={quoted(v)}" for k, v in options.items())]) + ";"


def cluster_keys(out: Mapped, cluster: Mapping[str, Any], path: str, secrets: Secrets) -> dict[str, Any]:
    """Put one cluster's connection keys into ``out``; returns the progress topic settings its
    ``config`` holds (:data:`PROGRESS_KEYS`, for the flows into it)."""
    alias = cluster["alias"]
    tls = cluster.get("tls")
    sasl = False
    if tls is not None:
        _trust(out, alias, tls.get("trustedCertificates") or [], f"{path}.tls.trustedCertificates", secrets)
    auth = cluster.get("authentication")
    if auth is not None:
        sasl = _authentication(out, alias, auth, f"{path}.authentication", tls is not None, secrets)
    protocol = ("SASL_" if sasl else "") + ("SSL" if tls is not None else "PLAINTEXT")
    out.put(f"{alias}.security.protocol", protocol, f"{path}.tls" if tls is not None else f"{path} (no tls)")
    progress: dict[str, Any] = {}
    for key, value in (cluster.get("config") or {}).items():
        where = f"{path}.config.{key}"
        value = secrets.resolve(value, where)
        if key in PROGRESS_KEYS:
            progress[key] = (value, where)
        elif is_connection_key(key) or any(key.startswith(kind + ".") for kind in CLIENT_KINDS):
            out.put(f"{alias}.{key}", value, where)
        elif key.startswith(_WORKER_KEYS):
            out.note(where, "a Kafka Connect worker setting; mm2py runs no Connect worker")
        else:  # a Java client setting: MM2 gives a cluster's settings to each of its clients
            for kind in CLIENT_KINDS:
                out.put(f"{alias}.{kind}.{key}", value, where)
    return progress


def _trust(out: Mapped, alias: str, certs: list[Mapping[str, Any]], path: str, secrets: Secrets) -> None:
    files: list[Path] = []
    for i, cert in enumerate(certs):
        where = f"{path}[{i}]"
        _required(cert, ("secretName",), where)
        if ("certificate" in cert) == ("pattern" in cert):
            raise ConfigError(f"{where}: set one of certificate or pattern", where)
        if "certificate" in cert:
            files.append(secrets.file(cert["secretName"], cert["certificate"], where))
        else:
            files.extend(secrets.matching(cert["secretName"], cert["pattern"], where))
    if not files:
        return
    out.put(f"{alias}.ssl.truststore.type", "PEM", path)
    if len(files) == 1:
        out.put(f"{alias}.ssl.truststore.location", str(files[0]), path)
    else:
        pems = []
        for f in files:
            try:
                pems.append(f.read_text().strip())
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{path}: cannot read {str(f)!r}: {exc}", path) from None
        out.put(f"{alias}.ssl.truststore.certificates", "\n".join(pems), path)


def _authentication(out: Mapped, alias: str, auth: Mapping[str, Any], path: str, tls: bool,
                    secrets: Secrets) -> bool:
    """Put the authentication's keys; returns whether it is SASL."""
    _required(auth, ("type",), path)
    kind = auth["type"]
    if kind == "oauth":
        return _oauth(out, alias, auth, path, tls, secrets)
    if kind not in _AUTH_FIELDS:
        known = [*_AUTH_FIELDS, "oauth"]
        raise ConfigError(f"{path}.type: unknown authentication type {kind!r}{did_you_mean(kind, known)} "
                          f"(known: {', '.join(known)})", f"{path}.type")
    for name in auth:
        if name != "type" and name not in _AUTH_FIELDS[kind]:
            raise ConfigError(f"{path}.{name}: not a field of authentication type {kind}", f"{path}.{name}")
    if kind == "tls":
        if not tls:
            raise ConfigError(f"{path}: TLS client authentication needs a TLS connection: add tls "
                              "(with trustedCertificates) to the cluster", path)
        _required(auth, ("certificateAndKey",), path)
        ck, where = auth["certificateAndKey"], f"{path}.certificateAndKey"
        _required(ck, ("secretName", "certificate", "key"), where)
        out.put(f"{alias}.ssl.keystore.type", "PEM", where)
        out.put(f"{alias}.ssl.keystore.certificate.chain",
                secrets.read(ck["secretName"], ck["certificate"], where).strip(), where)
        out.put(f"{alias}.ssl.keystore.key", secrets.read(ck["secretName"], ck["key"], where).strip(), where)
        return False
    if kind == "custom":
        for key, value in (auth.get("config") or {}).items():
            where = f"{path}.config.{key}"
            if not key.startswith(("sasl.", "ssl.keystore.")):
                raise ConfigError(f"{where}: custom authentication takes sasl.* and ssl.keystore.* keys "
                                  "only (others go in the cluster's config)", where)
            out.put(f"{alias}.{key}", secrets.resolve(value, where), where)
        return bool(auth.get("sasl"))
    _required(auth, ("username", "passwordSecret"), path)
    ps, where = auth["passwordSecret"], f"{path}.passwordSecret"
    _required(ps, ("secretName", "password"), where)
    password = secrets.read(ps["secretName"], ps["password"], where).strip()
    mechanism = "PLAIN" if kind == "plain" else kind.upper()
    out.put(f"{alias}.sasl.mechanism", mechanism, f"{path}.type")
    module = _MODULES["plain" if kind == "plain" else "scram"]
    out.put(f"{alias}.sasl.jaas.config", _jaas(module, {"username": auth["username"], "password": password}),
            path)
    return True


def _oauth(out: Mapped, alias: str, auth: Mapping[str, Any], path: str, tls: bool, secrets: Secrets) -> bool:
    for name, what in _OAUTH_UNSUPPORTED.items():
        if name in auth:
            raise ConfigError(f"{path}.{name}: mm2py's OAUTHBEARER login does not support {what} (it "
                              "supports client credentials: clientId with clientSecret, or an access token)",
                              f"{path}.{name}")
    grant = auth.get("grantType", "client_credentials")
    if grant != "client_credentials":
        raise ConfigError(f"{path}.grantType: {grant!r} is not supported (client_credentials only)",
                          f"{path}.grantType")
    for name, reason in _OAUTH_NOTES.items():
        if name in auth:
            out.note(f"{path}.{name}", reason)
    options: dict[str, str] = {}
    if "accessToken" in auth:
        ref, where = auth["accessToken"], f"{path}.accessToken"
        _required(ref, ("secretName", "key"), where)
        url, origin = f"file:{secrets.file(ref['secretName'], ref['key'], where)}", where
    elif "accessTokenLocation" in auth:
        url, origin = f"file:{auth['accessTokenLocation']}", f"{path}.accessTokenLocation"
    else:
        _required(auth, ("tokenEndpointUri", "clientId", "clientSecret"), path)
        ref, where = auth["clientSecret"], f"{path}.clientSecret"
        _required(ref, ("secretName", "key"), where)
        options["clientId"] = auth["clientId"]
        options["clientSecret"] = secrets.read(ref["secretName"], ref["key"], where).strip()
        url, origin = auth["tokenEndpointUri"], f"{path}.tokenEndpointUri"
        if auth.get("scope"):
            options["scope"] = auth["scope"]
    for key, value in (auth.get("saslExtensions") or {}).items():
        options[f"extension_{key}"] = str(value)
    out.put(f"{alias}.sasl.mechanism", "OAUTHBEARER", f"{path}.type")
    out.put(f"{alias}.sasl.login.callback.handler.class", _OIDC_HANDLER, f"{path}.type")
    out.put(f"{alias}.sasl.oauthbearer.token.endpoint.url", url, origin)
    out.put(f"{alias}.sasl.jaas.config", _jaas(OAUTH_MODULE, options), path)
    for name, key in (("connectTimeoutSeconds", "connect"), ("readTimeoutSeconds", "read")):
        if name in auth:
            out.put(f"{alias}.sasl.login.{key}.timeout.ms", auth[name] * 1000, f"{path}.{name}")
    if auth.get("tlsTrustedCertificates"):
        where = f"{path}.tlsTrustedCertificates"
        if tls:
            out.note(where, "the token endpoint is verified with the cluster's trusted certificates")
        else:
            _trust(out, alias, auth["tlsTrustedCertificates"], where, secrets)
    return True
