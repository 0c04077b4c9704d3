"""Classification of flat MM2 configuration keys (``mm2.properties`` style).

Key shapes (``A``/``B`` are declared cluster aliases):

* ``clusters`` — the alias list;
* ``<flow setting>`` (e.g. ``topics``) — applies to every flow; ``A->B.<flow setting>`` overrides it;
* ``A.bootstrap.servers``, ``A.security.protocol``, ``A.ssl.*``, ``A.sasl.*`` — connection settings
  for every client of cluster ``A`` (the same keys at top level are a fallback for all clusters);
* ``A.consumer.*`` / ``A.producer.*`` / ``A.admin.*`` — one client type of cluster ``A``;
* ``consumer.*`` etc. at top level or ``A->B.consumer.*`` — that client type in a flow, on both
  sides; ``A->B.source.consumer.*`` / ``A->B.target.admin.*`` — one side only;
  ``A->B.source.cluster.<connection key>`` / ``A->B.target.cluster.<connection key>`` — one side's
  connection settings;
* Connect worker / converter keys that MM2 files commonly carry (``offset.storage.*``,
  ``key.converter`` ...) are accepted and ignored (reported in ``ignored``).

Everything else is an error naming the key, with a suggestion when one is close.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mm2py.config.errors import ConfigError, did_you_mean
from mm2py.config.filters import split_list

__all__ = [
    "CLIENT_KINDS", "FlatConfig", "classify", "flow_client_key", "is_connection_key", "to_client_value",
]

CLIENT_KINDS = ("consumer", "producer", "admin")
_SIDES = ("source", "target")
_IGNORED_EXACT = frozenset(
    {
        "name",
        "connector.class",
        "source.cluster.alias",
        "target.cluster.alias",
        "config.providers",
        "dedicated.mode.enable.internal.rest",
        "metric.reporters",
        "forwarding.admin.class",
        "exactly.once.support",
        "transaction.boundary",
        "group.id",
        "client.id",
        "listeners",
        "task.shutdown.graceful.timeout.ms",
        "scheduled.rebalance.max.delay.ms",
        "exactly.once.source.support",
    }
)
_IGNORED_PREFIXES = (
    "offset.storage.",
    "config.storage.",
    "status.storage.",
    "key.converter",
    "value.converter",
    "header.converter",
    "worker.",
    "offset.flush.",
    "config.providers.",
    "rest.",
    "listeners.",  # the REST API's HTTPS settings (rest_api/security/settings.py)
    "mm2py.rest.",  # the REST API's roles and tokens (rest_api/security/settings.py)
    "admin.listeners",
    "errors.",
)


def is_connection_key(key: str) -> bool:
    """Keys MM2 passes from a cluster's settings to all its clients (MirrorClientConfig)."""
    return key in ("bootstrap.servers", "security.protocol") or key.startswith(("ssl.", "sasl."))


def _is_ignored(key: str) -> bool:
    return key in _IGNORED_EXACT or key.startswith(_IGNORED_PREFIXES)


def to_client_value(key: str, value: Any) -> str:
    """Client properties are strings, as in Java: ``True`` -> ``"true"``, lists comma-joined."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value).strip()
    if isinstance(value, list | tuple):
        return ",".join(to_client_value(key, v) for v in value)
    raise ConfigError(f"invalid value for {key!r}: expected a scalar, got {type(value).__name__}", key)


@dataclass
class FlatConfig:
    """Flat keys sorted by scope. Flow-setting values keep the key they came from."""

    clusters: list[str]
    top_settings: dict[str, tuple[Any, str]] = field(default_factory=dict)
    top_connection: dict[str, str] = field(default_factory=dict)
    top_clients: dict[str, dict[str, str]] = field(default_factory=dict)
    cluster_connection: dict[str, dict[str, str]] = field(default_factory=dict)
    cluster_clients: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    flow_settings: dict[tuple[str, str], dict[str, tuple[Any, str]]] = field(default_factory=dict)
    flow_clients: dict[tuple[str, str], dict[str, dict[str, str]]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


def _client_kind(key: str) -> tuple[str, str] | None:
    for kind in CLIENT_KINDS:
        if key.startswith(kind + ".") and len(key) > len(kind) + 1:
            return kind, key[len(kind) + 1 :]
    return None


def _longest_alias_prefix(text: str, aliases: Iterable[str]) -> str | None:
    best: str | None = None
    for alias in aliases:
        if text.startswith(alias + ".") and (best is None or len(alias) > len(best)):
            best = alias
    return best


def classify(raw: Mapping[str, Any], setting_names: frozenset[str]) -> FlatConfig:
    """Sort flat keys into scopes. ``setting_names`` are the flow-level MM2 setting names."""
    if "clusters" not in raw:
        raise ConfigError("missing required key 'clusters' (the list of cluster aliases)", "clusters")
    clusters_value = raw["clusters"]
    if not isinstance(clusters_value, str | list | tuple):
        raise ConfigError("'clusters' must be a comma-separated list of aliases", "clusters")
    aliases = list(dict.fromkeys(split_list(clusters_value)))
    if not aliases:
        raise ConfigError("'clusters' must name at least one cluster", "clusters")
    for alias in aliases:
        if "->" in alias or not alias.strip() or any(c.isspace() for c in alias):
            raise ConfigError(f"invalid cluster alias {alias!r} in 'clusters'", "clusters")
    flat = FlatConfig(clusters=aliases)
    for key, value in raw.items():
        if key == "clusters":
            continue
        if not isinstance(key, str):
            raise ConfigError(f"configuration keys must be strings, got {key!r}")
        if key in setting_names:
            flat.top_settings[key] = (value, key)
        elif "->" in key:
            _flow_key(flat, key, value, setting_names)
        elif is_connection_key(key):
            flat.top_connection[key] = to_client_value(key, value)
        elif (kc := _client_kind(key)) is not None:
            flat.top_clients.setdefault(kc[0], {})[kc[1]] = to_client_value(key, value)
        elif _is_ignored(key):
            flat.ignored.append(key)
        elif (cluster := _longest_alias_prefix(key, aliases)) is not None:
            _cluster_key(flat, cluster, key, value)
        else:
            candidates = set(setting_names) | {"clusters"}
            candidates |= {f"{a}.bootstrap.servers" for a in aliases}
            raise ConfigError(f"unknown key {key!r}{did_you_mean(key, candidates)}", key)
    return flat


def _cluster_key(flat: FlatConfig, alias: str, key: str, value: Any) -> None:
    sub = key[len(alias) + 1 :]
    if is_connection_key(sub):
        flat.cluster_connection.setdefault(alias, {})[sub] = to_client_value(key, value)
    elif (kc := _client_kind(sub)) is not None:
        kinds = flat.cluster_clients.setdefault(alias, {})
        kinds.setdefault(kc[0], {})[kc[1]] = to_client_value(key, value)
    elif _is_ignored(sub):
        flat.ignored.append(key)
    else:
        hint = did_you_mean(sub, ["bootstrap.servers", "security.protocol"])
        raise ConfigError(
            f"unknown key {key!r}{hint}: cluster-level keys are bootstrap.servers, "
            f"security.protocol, ssl.*, sasl.* and consumer.*/producer.*/admin.* overrides "
            f"(flow settings go under '{alias}->TARGET.')",
            key,
        )


def _flow_key(flat: FlatConfig, key: str, value: Any, setting_names: frozenset[str]) -> None:
    source, rest = key.split("->", 1)
    if source not in flat.clusters:
        raise ConfigError(
            f"unknown cluster alias {source!r} in key {key!r} (clusters: {', '.join(flat.clusters)})",
            key,
        )
    target = _longest_alias_prefix(rest, flat.clusters)
    if target is None:
        raise ConfigError(
            f"key {key!r} must look like '{source}->TARGET.setting' with TARGET one of: "
            f"{', '.join(flat.clusters)}",
            key,
        )
    if target == source:
        raise ConfigError(f"key {key!r}: a flow's source and target must differ", key)
    sub = rest[len(target) + 1 :]
    pair = (source, target)
    clients = flat.flow_clients.setdefault(pair, {})
    if sub in setting_names:
        flat.flow_settings.setdefault(pair, {})[sub] = (value, key)
        return
    client = flow_client_key(key, sub, setting_names)
    if client is None:
        flat.ignored.append(key)
    else:
        clients.setdefault(client[0], {})[client[1]] = to_client_value(key, value)


def flow_client_key(key: str, sub: str, setting_names: frozenset[str]) -> tuple[str, str] | None:
    """A flow's key ``key`` (``A->B.<sub>``) that is not one of its settings: the client override
    it is — (role: ``consumer``, ``source.admin``, ``target.cluster``..., property) — or None for a
    key accepted and ignored; an unknown key is a ``ConfigError`` naming ``key``."""
    for side in _SIDES:
        prefix = f"{side}.cluster."
        if sub.startswith(prefix):
            conn = sub[len(prefix) :]
            if not is_connection_key(conn):
                raise ConfigError(
                    f"unknown key {key!r}: only connection settings (bootstrap.servers, "
                    f"security.protocol, ssl.*, sasl.*) may follow '{prefix}'",
                    key,
                )
            return f"{side}.cluster", conn
        if sub.startswith(side + ".") and (kc := _client_kind(sub[len(side) + 1 :])) is not None:
            return f"{side}.{kc[0]}", kc[1]
    if (kc := _client_kind(sub)) is not None:
        return kc
    if _is_ignored(sub):
        return None
    raise ConfigError(f"unknown key {key!r}{did_you_mean(sub, setting_names)}", key)
