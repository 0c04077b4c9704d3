"""A connector config checked key by key with mm2py's own configuration checks (pure).

Kafka Connect's ``PUT /connector-plugins/{class}/config/validate`` reports each problem on the key
it concerns, so a UI can show it beside the field. mm2py's checks are those of its configuration
file: a connector's settings are the flow's MM2 keys (``east->west.tasks.max``), so each key is
checked by building a configuration that holds the pair and that key alone and letting mm2py's
loader and settings model judge it (an unknown key with its did-you-mean hint, a value out of
range, a replication policy class it does not know, a regular expression that does not compile,
a cluster-level key that is not a connection setting...). The facade refuses to create a connector
whose config has any problem, so what validates is what can be created.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mm2py.config.errors import ConfigError
from mm2py.config.models import MirrorMakerConfig
from mm2py.rest_api.connect.config import (
    CONNECT_KEYS,
    CONNECT_PREFIXES,
    ConnectorConfigError,
    connector_kind,
)
from mm2py.rest_api.connect.defs import ConfigKey
from mm2py.rest_api.shared import HIDDEN, is_secret

__all__ = ["problems", "value_infos"]

#: a stand-in address for the pair's clusters while one key is checked (nothing connects to it)
_ADDRESS = "localhost:9092"


def problems(config: Mapping[str, Any], clusters: Mapping[str, str]) -> dict[str, list[str]]:
    """Each problem of ``config`` under the key it concerns (none: the connector can be created).
    ``clusters``: the aliases the worker knows, with their bootstrap servers."""
    out: dict[str, list[str]] = {}

    def add(key: str, message: str) -> None:
        out.setdefault(key, []).append(message)

    values: dict[str, str] = {}
    for key, value in config.items():
        if value is None:
            add(key, "a null value cannot be given (leave the key out for its default)")
        elif isinstance(value, bool):
            values[key] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            values[key] = str(value)
        else:
            add(key, "Connect configs are strings")
    if not values.get("name", "").strip() and "name" not in out:
        add("name", "missing required key 'name'")
    try:
        connector_kind(values)
    except ConnectorConfigError as exc:
        add("connector.class", str(exc))
    aliases, given = _aliases(values, add)
    for key, value in values.items():
        message = _key_problem(key, value, aliases, clusters)
        if message is not None:
            add(key, message)
    for side, alias, ok in zip(("source", "target"), aliases, given, strict=True):
        servers = f"{side}.cluster.bootstrap.servers"
        if ok and alias not in clusters and not values.get(servers):
            add(servers, f"the worker does not know cluster {alias!r}: give its bootstrap servers")
    return out


def _aliases(values: Mapping[str, str], add: Callable[[str, str], None]
             ) -> tuple[tuple[str, str], tuple[bool, bool]]:
    """The pair's aliases, and whether each was given usable (else a stand-in: ``source``/``target``)."""
    aliases, given = ["source", "target"], [False, False]
    for i, side in enumerate(("source", "target")):
        key = f"{side}.cluster.alias"
        alias = values.get(key, "").strip()
        if not alias:
            add(key, f"missing required key {key!r}")
        elif "->" in alias or any(c.isspace() or c in "/," for c in alias):
            add(key, f"invalid cluster alias {alias!r}")
        else:
            aliases[i], given[i] = alias, True
    if aliases[0] == aliases[1]:
        if all(given):
            add("target.cluster.alias", "source.cluster.alias and target.cluster.alias must differ")
        given[1] = False
        aliases[1] = "other" if aliases[0] == "target" else "target"
    return (aliases[0], aliases[1]), (given[0], given[1])


def _key_problem(key: str, value: str, aliases: tuple[str, str], clusters: Mapping[str, str]) -> str | None:
    source, target = aliases
    if key in ("name", "connector.class", "source.cluster.alias", "target.cluster.alias"):
        return None
    if key in CONNECT_KEYS or key.startswith(CONNECT_PREFIXES):
        return None  # Connect's own: accepted without effect
    if key.split(".", 1)[0] in ("transforms", "predicates"):
        return ("Single Message Transforms are not supported (mm2py mirrors raw record batches "
                "byte for byte)")
    for side, alias in (("source", source), ("target", target)):
        prefix = f"{side}.cluster."
        if key.startswith(prefix):
            sub = key[len(prefix):]
            known = clusters.get(alias)
            if known is not None:
                if sub == "bootstrap.servers" and value != known:
                    return (f"cluster {alias!r} is already {known}; it cannot be re-pointed to "
                            f"{value} while the worker runs")
                return None
            flat = {"clusters": alias, f"{alias}.bootstrap.servers": _ADDRESS, f"{alias}.{sub}": value}
            return _judged(flat, f"{alias}.{sub}", key)
    flat = {"clusters": f"{source},{target}", f"{source}.bootstrap.servers": _ADDRESS,
            f"{target}.bootstrap.servers": _ADDRESS, f"{source}->{target}.{key}": value}
    return _judged(flat, f"{source}->{target}.{key}", key)


def _judged(flat: Mapping[str, str], mm2_key: str, key: str) -> str | None:
    """mm2py's configuration loader on ``flat``: its message, if it refuses it."""
    try:
        MirrorMakerConfig.from_flat(flat)
    except ConfigError as exc:
        return str(exc)
    except ValueError as exc:  # e.g. an address the loader cannot parse
        return f"invalid value for {mm2_key!r}: {exc}"
    return None


def value_infos(keys: list[ConfigKey], config: Mapping[str, Any],
                found: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    """Connect's ``configs`` of a validation: each defined key with its value (the given one, or
    its default) and errors, after the keys with problems that no definition names."""
    defined = {k.name for k in keys}

    def value(name: str, given: Any) -> dict[str, Any]:
        text = None if given is None else ("true" if given is True else "false" if given is False
                                           else HIDDEN if is_secret(name) else str(given))
        return {"name": name, "value": text, "recommended_values": [], "errors": found.get(name, []),
                "visible": True}

    out = [{"definition": None, "value": value(name, config.get(name))}
           for name in found if name not in defined]
    for key in keys:
        given = config.get(key.name, key.default)
        errors = found.get(key.name, [])
        if key.required and given is None and not errors:
            errors = [f"missing required key {key.name!r}"]
        out.append({"definition": key.info(), "value": {**value(key.name, given), "errors": errors}})
    return out
