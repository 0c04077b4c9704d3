"""Reading configuration files into flat MM2 keys.

Accepted documents (YAML or JSON), which may be mixed:

.. code-block:: yaml

    clusters:                       # nested form: alias -> settings (or just "host:port")
      east: {bootstrap.servers: "east1:9092", consumer: {fetch.min.bytes: 1}}
      west: "west1:9092"
    flows:                          # "A->B" -> settings; a listed flow is enabled by default
      east->west: {topics: [orders, "payments.*"], tasks.max: 4}
    replication.factor: 3           # top-level settings apply to every flow

    # ...or flat MM2 keys, exactly as in mm2.properties:
    # clusters: east, west
    # east.bootstrap.servers: east1:9092
    # east->west.enabled: true

Nested mappings are joined with ``.`` (``consumer: {a.b: 1}`` is ``consumer.a.b``). A key reached
twice (e.g. flat and nested spellings of the same setting) is an error.

A document holding Strimzi's ``KafkaMirrorMaker2`` resource (``kind: KafkaMirrorMaker2``) is read as
the equivalent flat keys by :mod:`mm2py.config.strimzi`, its Secrets from ``secrets_dir``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mm2py.config.errors import ConfigError
from mm2py.config.properties import decode_properties_bytes, parse_properties

__all__ = ["ConfigSource", "flatten_document", "read_config", "read_document", "read_flat_config",
           "source_of_document"]


@dataclass(frozen=True)
class ConfigSource:
    """Flat MM2 keys as read; for a Strimzi resource also the resource path each key came from
    (``origins``, for errors) and the resource's fields ignored, each with its reason (``notes``)."""

    keys: dict[str, Any]
    origins: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


class _Flattener:
    def __init__(self) -> None:
        self.out: dict[str, Any] = {}

    def put(self, key: str, value: Any) -> None:
        if key in self.out:
            raise ConfigError(f"duplicate key {key!r}", key)
        self.out[key] = value

    def walk(self, prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                if not isinstance(k, str):
                    where = f" under {prefix!r}" if prefix else ""
                    raise ConfigError(f"configuration keys must be strings, got {k!r}{where}")
                self.walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            self.put(prefix, value)


def flatten_document(doc: Any) -> dict[str, Any]:
    """Turn a nested/flat YAML or JSON document into flat MM2 keys."""
    if not isinstance(doc, Mapping):
        raise ConfigError("the configuration must be a mapping of keys to values")
    f = _Flattener()
    for key, value in doc.items():
        if key == "clusters" and isinstance(value, Mapping):
            _clusters(f, value)
        elif key == "flows":
            _flows(f, value)
        elif not isinstance(key, str):
            raise ConfigError(f"configuration keys must be strings, got {key!r}")
        else:
            f.walk(key, value)
    return f.out


def _clusters(f: _Flattener, clusters: Mapping[Any, Any]) -> None:
    f.put("clusters", [str(alias) for alias in clusters])
    for alias, body in clusters.items():
        if body is None:
            continue
        if isinstance(body, str):
            f.put(f"{alias}.bootstrap.servers", body)
        elif isinstance(body, Mapping):
            f.walk(str(alias), body)
        else:
            raise ConfigError(
                f"cluster {alias!r}: expected a mapping of settings or a bootstrap servers string",
                f"clusters.{alias}",
            )


def _flows(f: _Flattener, flows: Any) -> None:
    if isinstance(flows, list | tuple):
        flows = {name: None for name in flows}
    if not isinstance(flows, Mapping):
        raise ConfigError("'flows' must map 'SOURCE->TARGET' to settings", "flows")
    for name, body in flows.items():
        if not isinstance(name, str) or "->" not in name:
            raise ConfigError(f"flow name {name!r} must look like 'SOURCE->TARGET'", "flows")
        body = {} if body is None else body
        if not isinstance(body, Mapping):
            raise ConfigError(f"flow {name!r}: expected a mapping of settings", f"flows.{name}")
        f.walk(name, body)
        if f"{name}.enabled" not in f.out:
            f.put(f"{name}.enabled", True)


def source_of_document(doc: Any, secrets_dir: str | Path | None = None) -> ConfigSource:
    """A parsed YAML/JSON document as flat keys: a Strimzi resource mapped, any other flattened."""
    if isinstance(doc, Mapping) and "kind" in doc:  # a Kubernetes resource, perhaps
        from mm2py.config.strimzi import is_resource, resource_to_flat

        if not is_resource(doc):
            return ConfigSource(flatten_document(doc))
        resource = resource_to_flat(doc, secrets_dir)
        return ConfigSource(resource.keys, resource.origins, resource.notes)
    return ConfigSource(flatten_document(doc))


def read_flat_config(path: str | Path, secrets_dir: str | Path | None = None) -> dict[str, Any]:
    """Read a ``.properties``, ``.yaml``/``.yml`` or ``.json`` file into flat MM2 keys."""
    return read_config(path, secrets_dir).keys


def read_config(path: str | Path, secrets_dir: str | Path | None = None) -> ConfigSource:
    """Read a ``.properties``, ``.yaml``/``.yml`` or ``.json`` file (which may hold a Strimzi
    ``KafkaMirrorMaker2`` resource, its Secrets read from ``secrets_dir``)."""
    p = Path(path)
    doc = read_document(p)
    if doc is None:  # a .properties file
        props = parse_properties(decode_properties_bytes(_read_bytes(p)))
        return ConfigSource({k: v.strip() for k, v in props.items()})
    return source_of_document(doc, secrets_dir)


def read_document(path: str | Path) -> Any:
    """The parsed document of a ``.yaml``/``.yml`` or ``.json`` configuration file (the one place such
    a file is parsed: :func:`read_config` reads it so, and ``flow-offsets import`` looks in it for a
    Strimzi resource's offsets topic); None for a ``.properties`` file, which holds no document.
    Raises :class:`ConfigError` for a file of another type, one that cannot be read or parsed, and
    an empty one."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".properties", ".yaml", ".yml", ".json"):
        raise ConfigError(
            f"unsupported configuration file type {p.name!r}: use .properties, .yaml, .yml or .json"
        )
    if suffix == ".properties":
        return None
    data = _read_bytes(p)
    import yaml  # only YAML files need it (~15 ms of every start otherwise)

    try:
        doc = json.loads(data) if suffix == ".json" else yaml.safe_load(data)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot parse {p.name}: {exc}") from None
    if doc is None:
        raise ConfigError(f"{p.name} is empty")
    return doc


def _read_bytes(p: Path) -> bytes:
    try:
        return p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {str(p)!r}: {exc.strerror}") from None
