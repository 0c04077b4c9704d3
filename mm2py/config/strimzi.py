"""Strimzi's ``KafkaMirrorMaker2`` resource read as the equivalent flat MM2 configuration.

A YAML/JSON document with ``kind: KafkaMirrorMaker2`` and an ``apiVersion`` of ``kafka.strimzi.io/``
(:func:`is_resource`) is what ``load_config`` reads as one: both shapes of the CRD,

* ``kafka.strimzi.io/v1``: ``spec.target`` and ``spec.mirrors[].source``;
* ``kafka.strimzi.io/v1beta2`` (and older): ``spec.clusters`` with ``spec.connectCluster`` and
  ``spec.mirrors[].sourceCluster``/``targetCluster`` (or already v1's ``target``/``source``),
  ``heartbeatConnector``, the ``*BlacklistPattern`` fields, ``pause``, ``oauth`` authentication.

Each mirror is the flow ``source->target``, enabled: ``topicsPattern``/``topicsExcludePattern``/
``groupsPattern``/``groupsExcludePattern`` are its ``topics``/``topics.exclude``/``groups``/
``groups.exclude`` (the same regexes or comma lists, as Strimzi passes them on),
``sourceConnector.tasksMax`` its ``tasks.max``, the connectors' ``config`` its settings and client
overrides (the same key set differently by two connectors is an error naming both). As under Strimzi,
a mirror without a ``checkpointConnector`` emits no checkpoints and syncs no group offsets, one without
a ``heartbeatConnector`` (every v1 mirror) emits no heartbeats, and cluster pairs no mirror names run
nothing. Clusters: :mod:`mm2py.config.strimzi_security`. Fields, and why some are ignored:
:mod:`mm2py.config.strimzi_schema`; what is ignored is in :attr:`ResourceConfig.notes`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mm2py.config.errors import ConfigError, did_you_mean
from mm2py.config.flat import flow_client_key
from mm2py.config.settings import FlowSettings
from mm2py.config.strimzi_schema import IGNORED, check_resource
from mm2py.config.strimzi_security import Mapped, Secrets, cluster_keys

__all__ = ["DEFAULT_OFFSETS_TOPIC", "DEFAULT_SECRETS_DIR", "SECRETS_DIR_ENV", "ResourceConfig",
           "connect_offsets_of", "is_resource", "resource_to_flat", "secrets_directory"]

KIND = "KafkaMirrorMaker2"
GROUP = "kafka.strimzi.io/"
#: where Secrets are read from when neither ``secrets_dir`` nor :data:`SECRETS_DIR_ENV` says
DEFAULT_SECRETS_DIR = "/etc/mm2py/secrets"
SECRETS_DIR_ENV = "MM2PY_SECRETS_DIR"
_SETTING_NAMES = FlowSettings.setting_names()
_ALIAS = re.compile(r"^[a-zA-Z0-9._\-]{1,100}$")
_CONNECTORS = ("sourceConnector", "checkpointConnector", "heartbeatConnector")
_CONNECTOR_IGNORED = {
    "autoRestart": IGNORED["autoRestart"], "listOffsets": IGNORED["listOffsets"],
    "alterOffsets": IGNORED["alterOffsets"], "version": "the connector plugin's version",
}
_ONE_JOB = "mm2py runs a flow's checkpoints and heartbeats in one job each; tasks.max is sourceConnector's"
#: the Kafka Connect offsets topic Strimzi gives a KafkaMirrorMaker2 that names none
DEFAULT_OFFSETS_TOPIC = "mirrormaker2-cluster-offsets"
_TARGET_IGNORED = ("groupId", "configStorageTopic", "statusStorageTopic", "offsetStorageTopic")


@dataclass(frozen=True)
class ResourceConfig:
    """A resource as flat MM2 keys, the resource path each key came from, and what was ignored."""

    keys: dict[str, Any]
    origins: dict[str, str]
    notes: tuple[str, ...]


def is_resource(doc: Any) -> bool:
    """Whether a parsed YAML/JSON document is a Strimzi ``KafkaMirrorMaker2`` resource."""
    return (isinstance(doc, Mapping) and doc.get("kind") == KIND
            and str(doc.get("apiVersion", "")).startswith(GROUP))


def connect_offsets_of(doc: Mapping[str, Any], source: str, target: str) -> tuple[str, str]:
    """(Kafka Connect offsets topic, source connector name) of the mirror ``source->target`` as Strimzi
    runs it: the topic is v1's ``spec.target.offsetStorageTopic``, else the ``offset.storage.topic``
    of the v1beta2 ``spec.connectCluster``'s ``config``, else :data:`DEFAULT_OFFSETS_TOPIC`; the
    connector is ``<source>-><target>.MirrorSourceConnector``, as Strimzi names it."""
    spec = doc.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    topic: Any = None
    target_body = spec.get("target")
    if isinstance(target_body, Mapping):
        topic = target_body.get("offsetStorageTopic") or (target_body.get("config") or {}).get(
            "offset.storage.topic")
    else:
        connect = spec.get("connectCluster")
        for cluster in spec.get("clusters") or []:
            if isinstance(cluster, Mapping) and cluster.get("alias") == connect:
                topic = (cluster.get("config") or {}).get("offset.storage.topic")
    return str(topic or DEFAULT_OFFSETS_TOPIC), f"{source}->{target}.MirrorSourceConnector"


def secrets_directory(secrets_dir: str | Path | None = None) -> Path:
    """``secrets_dir``, else ``$MM2PY_SECRETS_DIR``, else :data:`DEFAULT_SECRETS_DIR`."""
    return Path(secrets_dir or os.environ.get(SECRETS_DIR_ENV) or DEFAULT_SECRETS_DIR)


def resource_to_flat(doc: Mapping[str, Any], secrets_dir: str | Path | None = None) -> ResourceConfig:
    """Map a ``KafkaMirrorMaker2`` resource to flat MM2 keys (Secrets read from ``secrets_dir``)."""
    api_version = str(doc["apiVersion"])
    check_resource(doc, api_version)
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        raise ConfigError("spec: required", "spec")
    out = Mapped()
    secrets = Secrets(secrets_directory(secrets_dir))
    if doc.get("status") is not None:
        out.note("status", IGNORED["status"])
    for key in spec:
        if key in IGNORED:
            out.note(f"spec.{key}", IGNORED[key])
    declared = _declared(spec)
    target = _target_alias(spec, declared)
    mirrors = spec.get("mirrors") or []
    if not mirrors:
        raise ConfigError("spec.mirrors: no mirror: nothing to run", "spec.mirrors")
    pairs: list[tuple[str, str, int]] = []
    for i, mirror in enumerate(mirrors):
        source = _source_alias(mirror, f"spec.mirrors[{i}]", declared)
        into = mirror.get("targetCluster") or target
        _known(into, f"spec.mirrors[{i}].targetCluster", declared)
        if source == into:
            raise ConfigError(f"spec.mirrors[{i}]: source and target are both {source!r}",
                              f"spec.mirrors[{i}]")
        pairs.append((source, into, i))
    used = list(dict.fromkeys([target, *(a for s, t, _ in pairs for a in (t, s))]))
    out.put("clusters", used, "spec")
    progress: dict[str, dict[str, Any]] = {}
    for alias in used:
        body, path = declared[alias]
        _required(body, ("alias", "bootstrapServers"), path)
        out.put(f"{alias}.bootstrap.servers", body["bootstrapServers"], f"{path}.bootstrapServers")
        progress[alias] = cluster_keys(out, body, path, secrets)
        for name in _TARGET_IGNORED:
            if name in body:
                out.note(f"{path}.{name}", IGNORED[name])
    for alias, (_, path) in declared.items():
        if alias not in used:
            out.note(path, f"cluster {alias!r} is declared but no mirror uses it")
    # MM2 would run heartbeats for every pair of clusters; Strimzi runs only the mirrors' connectors
    out.put("emit.heartbeats.enabled", False, "spec.mirrors (a pair no mirror names runs nothing)")
    seen: dict[str, int] = {}
    for source, into, i in pairs:
        flow = f"{source}->{into}"
        if flow in seen:
            raise ConfigError(f"spec.mirrors[{seen[flow]}] and spec.mirrors[{i}] both mirror {flow}",
                              f"spec.mirrors[{i}]")
        seen[flow] = i
        _mirror(out, mirrors[i], f"spec.mirrors[{i}]", flow, secrets)
        for key, (value, where) in progress[into].items():
            out.put(f"{flow}.{key}", value, where)
    targets = {into for _, into, _ in pairs}
    for alias in (a for a in used if a not in targets):
        for _, where in progress[alias].values():
            out.note(where, "a Kafka Connect worker setting, and no mirror writes to this cluster")
    return ResourceConfig(out.keys, out.origins, tuple(out.notes))


def _required(body: Mapping[str, Any], names: tuple[str, ...], path: str) -> None:
    for name in names:
        if body.get(name) in (None, ""):
            raise ConfigError(f"{path}.{name}: required", f"{path}.{name}")


def _declared(spec: Mapping[str, Any]) -> dict[str, tuple[Mapping[str, Any], str]]:
    """Every cluster the resource defines: alias -> (its body, its path)."""
    found: dict[str, tuple[Mapping[str, Any], str]] = {}

    def add(body: Any, path: str) -> None:
        if body is None:
            return
        _required(body, ("alias",), path)
        alias = body["alias"]
        if not _ALIAS.match(alias):
            raise ConfigError(f"{path}.alias: {alias!r} is not a cluster alias (letters, digits, '.', '_', "
                              "'-'; at most 100)", f"{path}.alias")
        if alias in found and _cluster_part(found[alias][0]) != _cluster_part(body):
            raise ConfigError(f"{found[alias][1]} and {path} define cluster {alias!r} differently", path)
        found.setdefault(alias, (body, path))

    for i, cluster in enumerate(spec.get("clusters") or []):
        add(cluster, f"spec.clusters[{i}]")
    add(spec.get("target"), "spec.target")
    for i, mirror in enumerate(spec.get("mirrors") or []):
        add(mirror.get("source"), f"spec.mirrors[{i}].source")
    return found


def _cluster_part(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in _TARGET_IGNORED}


def _known(alias: str, path: str, declared: Mapping[str, Any]) -> None:
    if alias not in declared:
        raise ConfigError(f"{path}: no cluster {alias!r}{did_you_mean(alias, declared)} (clusters: "
                          f"{', '.join(declared)})", path)


def _target_alias(spec: Mapping[str, Any], declared: Mapping[str, Any]) -> str:
    target, connect = spec.get("target"), spec.get("connectCluster")
    if target is not None:
        if connect is not None and connect != target.get("alias"):
            raise ConfigError(f"spec.connectCluster: {connect!r} is not spec.target's alias "
                              f"{target.get('alias')!r}", "spec.connectCluster")
        return str(target["alias"])
    if connect is None:
        raise ConfigError("spec.target: required (or, in v1beta2, spec.connectCluster)", "spec.target")
    _known(connect, "spec.connectCluster", declared)
    return str(connect)


def _source_alias(mirror: Mapping[str, Any], path: str, declared: Mapping[str, Any]) -> str:
    source, named = mirror.get("source"), mirror.get("sourceCluster")
    if source is not None:
        if named is not None and named != source.get("alias"):
            raise ConfigError(f"{path}.sourceCluster: {named!r} is not {path}.source's alias",
                              f"{path}.sourceCluster")
        return str(source["alias"])
    if named is None:
        raise ConfigError(f"{path}.source: required (or, in v1beta2, {path}.sourceCluster)",
                          f"{path}.source")
    _known(named, f"{path}.sourceCluster", declared)
    return str(named)


def _state(connector: Mapping[str, Any]) -> str:
    return str(connector.get("state") or ("paused" if connector.get("pause") else "running"))


def _mirror(out: Mapped, mirror: Mapping[str, Any], path: str, flow: str, secrets: Secrets) -> None:
    source = mirror.get("sourceConnector")
    if source is None:
        raise ConfigError(f"{path}.sourceConnector: required by mm2py: its flows always mirror records "
                          "(a mirror of checkpoints or heartbeats alone is not supported)",
                          f"{path}.sourceConnector")
    running = _state(source) == "running"
    out.put(f"{flow}.enabled", running, f"{path}.sourceConnector" + ("" if running else ".state"))
    if not running:
        out.notes.append(f"{path}.sourceConnector.state: {_state(source)}: the flow {flow} is not started "
                         "(no records mirrored, as under Strimzi)")
    for name, key in (("topicsPattern", "topics"), ("topicsExcludePattern", "topics.exclude"),
                      ("groupsPattern", "groups"), ("groupsExcludePattern", "groups.exclude")):
        if mirror.get(name) is not None:
            out.put(f"{flow}.{key}", mirror[name], f"{path}.{name}")
    for old, new, key in (("topicsBlacklistPattern", "topicsExcludePattern", "topics.exclude"),
                          ("groupsBlacklistPattern", "groupsExcludePattern", "groups.exclude")):
        if mirror.get(old) is not None:
            if mirror.get(new) is not None:
                out.note(f"{path}.{old}", f"deprecated, and {new} is set")
            else:
                out.put(f"{flow}.{key}", mirror[old], f"{path}.{old}")
    if source.get("tasksMax") is not None:
        out.put(f"{flow}.tasks.max", source["tasksMax"], f"{path}.sourceConnector.tasksMax")
    for name in _CONNECTORS:
        connector = mirror.get(name)
        if connector is not None:
            _connector(out, connector, f"{path}.{name}", flow, secrets)
    checkpoint = mirror.get("checkpointConnector")
    if checkpoint is None or _state(checkpoint) != "running":
        origin = (f"{path} (no checkpointConnector)" if checkpoint is None
                  else f"{path}.checkpointConnector.state")
        out.put(f"{flow}.emit.checkpoints.enabled", False, origin)
        out.put(f"{flow}.sync.group.offsets.enabled", False, origin)
    heartbeat = mirror.get("heartbeatConnector")
    beats = heartbeat is not None and _state(heartbeat) == "running"
    where = (f"{path} (no heartbeatConnector)" if heartbeat is None
             else f"{path}.heartbeatConnector" + ("" if beats else ".state"))
    out.put(f"{flow}.emit.heartbeats.enabled", beats, where)


def _connector(out: Mapped, connector: Mapping[str, Any], path: str, flow: str, secrets: Secrets) -> None:
    source = path.endswith(".sourceConnector")
    for name, reason in _CONNECTOR_IGNORED.items():
        if name in connector:
            out.note(f"{path}.{name}", reason)
    if not source and connector.get("tasksMax") is not None:
        out.note(f"{path}.tasksMax", _ONE_JOB)
    if connector.get("pause") is not None and connector.get("state") is not None:
        out.note(f"{path}.pause", "deprecated, and state is set")
    for key, value in (connector.get("config") or {}).items():
        where = f"{path}.config.{key}"
        value = secrets.resolve(value, where)
        if key == "tasks.max" and not source:
            out.note(where, _ONE_JOB)
        elif key in _SETTING_NAMES or _client_key(where, key):
            out.put(f"{flow}.{key}", value, where)
        else:
            out.note(where, "a Kafka Connect setting without meaning in mm2py")


def _client_key(where: str, key: str) -> bool:
    """Whether a connector's config ``key`` is a client override (False: accepted and ignored)."""
    try:
        return flow_client_key(where, key, _SETTING_NAMES) is not None
    except ConfigError as exc:  # "unknown key '<where>' ..." -> "<where>: unknown key '<key>' ..."
        raise ConfigError(f"{where}: {str(exc).replace(repr(where), repr(key))}", where) from None
