"""MirrorMaker 2 connector configurations (as posted to Kafka Connect) mapped onto mm2py flows (pure).

A Connect cluster running MM2 has three connectors per ``source->target`` pair; mm2py has flows
that do all three jobs. The mapping:

- ``MirrorSourceConnector`` *is* a flow of its pair, named as the connector (a pair may have
  several with disjoint topics; one named ``source->target`` is the pair's unnamed flow): creating
  it creates the flow, its config keys are the flow's settings (MM2 names: ``topics``,
  ``tasks.max``, ``replication.policy.*``, ...), changing it changes the flow, deleting it removes
  the flow. Created alone, the flow emits no
  checkpoints and no heartbeats (as with Connect, where those are other connectors' jobs) unless
  its config turns them on.
- ``MirrorCheckpointConnector`` owns the flow's checkpoint settings (``emit.checkpoints.*``,
  ``sync.group.offsets.*``, ``groups``, ``groups.exclude``, ``refresh.groups.*``,
  ``checkpoints.topic.replication.factor``) of every flow of its pair: creating it turns
  checkpoints on, deleting it off. It needs a flow of its pair.
- ``MirrorHeartbeatConnector`` owns ``emit.heartbeats.*`` and ``heartbeats.topic.replication.factor``
  of the pair (no flow needed, as in MM2 heartbeats are per cluster pair).

Every connector names its pair with ``source.cluster.alias`` and ``target.cluster.alias``; a
cluster the worker does not know yet comes with ``source.cluster.bootstrap.servers`` (and other
``source.cluster.*`` connection settings), likewise for the target. Keys of Kafka Connect's own
(converters, ``errors.*``) are accepted and have no effect; Single Message Transforms are refused
(raw batches are mirrored byte for byte). The checkpoint and heartbeat connectors accept the
common MM2 keys (``replication.policy.class``, ``topics``...) without applying them: the flow's
come from its MirrorSourceConnector.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mm2py.config.errors import ConfigError
from mm2py.config.models import FlowConfig, pair_name
from mm2py.config.patch import FlowPatch, Forget
from mm2py.runtime.worker_base import HEARTBEAT_KEYS

__all__ = [
    "CHECKPOINT_KEYS",
    "CLASSES",
    "CONNECT_KEYS",
    "CONNECT_PREFIXES",
    "ConnectorConfigError",
    "ConnectorPlan",
    "Kind",
    "as_text",
    "connector_kind",
    "connector_patch",
    "flow_connector_config",
    "owned_keys",
    "plan_connector",
    "released_settings",
]

Kind = Literal["source", "checkpoint", "heartbeat"]
_PACKAGE = "org.apache.kafka.connect.mirror."
CLASSES: dict[Kind, str] = {
    "source": _PACKAGE + "MirrorSourceConnector",
    "checkpoint": _PACKAGE + "MirrorCheckpointConnector",
    "heartbeat": _PACKAGE + "MirrorHeartbeatConnector",
}
#: the flow settings a MirrorCheckpointConnector owns
CHECKPOINT_KEYS = frozenset({
    "emit.checkpoints.enabled", "emit.checkpoints.interval.seconds", "sync.group.offsets.enabled",
    "sync.group.offsets.interval.seconds", "groups", "groups.exclude", "refresh.groups.enabled",
    "refresh.groups.interval.seconds", "checkpoints.topic.replication.factor", "group.filter.class",
})
_OWNED: dict[Kind, frozenset[str]] = {"checkpoint": CHECKPOINT_KEYS, "heartbeat": HEARTBEAT_KEYS}
#: what a checkpoint or heartbeat connector turns on when created (off when deleted)
_SWITCHES: dict[Kind, tuple[str, ...]] = {
    "checkpoint": ("emit.checkpoints.enabled", "sync.group.offsets.enabled"),
    "heartbeat": ("emit.heartbeats.enabled",),
}
#: Kafka Connect's own keys: accepted, no meaning for raw batch mirroring
CONNECT_KEYS = frozenset({"name", "key.converter", "value.converter", "header.converter",
                          "config.action.reload", "errors.tolerance", "errors.retry.timeout",
                          "errors.retry.delay.max.ms", "errors.log.enable", "errors.log.include.messages",
                          "connector.plugin.version", "tasks.max.enforce"})
CONNECT_PREFIXES = ("key.converter.", "value.converter.", "header.converter.")


class ConnectorConfigError(ConfigError):
    """A connector config mm2py cannot map onto a flow (the message names the key)."""


@dataclass(frozen=True)
class ConnectorPlan:
    """What a connector config means for the worker: its pair, new clusters, flow settings."""

    kind: Kind
    source: str
    target: str
    clusters: dict[str, dict[str, str]] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()  # keys accepted without effect

    @property
    def flow(self) -> str:
        """The name of the connector's pair (its flow's, for a MirrorSourceConnector's default)."""
        return pair_name(self.source, self.target)


def connector_kind(config: Mapping[str, Any]) -> Kind:
    """The kind of ``connector.class`` (full or simple class name); anything else is refused."""
    name = str(config.get("connector.class", "")).strip()
    if not name:
        raise ConnectorConfigError("missing required key 'connector.class'", "connector.class")
    for kind, full in CLASSES.items():
        if name in (full, full.rsplit(".", 1)[1]):
            return kind
    known = ", ".join(c.rsplit(".", 1)[1] for c in CLASSES.values())
    raise ConnectorConfigError(
        f"connector class {name!r} is not supported: mm2py runs MirrorMaker 2's connectors ({known})",
        "connector.class")


def as_text(config: Mapping[str, Any]) -> dict[str, str]:
    """A posted config with Connect's string values (``true``, ``3``); other JSON is refused."""
    return {str(k): _text(str(k), v) for k, v in config.items()}


def _text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ConnectorConfigError(f"invalid value for {key!r}: Connect configs are strings", key)


def _cluster_keys(config: Mapping[str, str], side: str) -> tuple[str, dict[str, str]]:
    alias_key = f"{side}.cluster.alias"
    alias = config.get(alias_key, "").strip()
    if not alias:
        raise ConnectorConfigError(f"missing required key {alias_key!r}", alias_key)
    prefix = f"{side}.cluster."
    props = {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix) and k != alias_key}
    return alias, props


def plan_connector(
    config: Mapping[str, Any], *, has_checkpoint: bool = False, has_heartbeat: bool = False
) -> ConnectorPlan:
    """Map one MM2 connector config onto the worker's terms (see the module docstring).

    ``has_checkpoint`` / ``has_heartbeat``: the pair has those connectors already, so a
    MirrorSourceConnector leaves their settings alone instead of turning them off."""
    values = as_text(config)
    kind = connector_kind(values)
    for key in values:
        if key.split(".", 1)[0] in ("transforms", "predicates"):
            raise ConnectorConfigError(
                f"{key!r}: Single Message Transforms are not supported (mm2py mirrors raw record "
                "batches byte for byte)", key)
    source, source_props = _cluster_keys(values, "source")
    target, target_props = _cluster_keys(values, "target")
    if source == target:
        raise ConnectorConfigError("source.cluster.alias and target.cluster.alias must differ",
                                   "target.cluster.alias")
    clusters = {alias: props for alias, props in ((source, source_props), (target, target_props)) if props}
    rest = {k: v for k, v in values.items() if k != "connector.class" and not k.startswith(
        ("source.cluster.", "target.cluster.")) and k not in CONNECT_KEYS
        and not k.startswith(CONNECT_PREFIXES)}
    ignored = sorted(k for k in values if k in CONNECT_KEYS or k.startswith(CONNECT_PREFIXES))
    if kind == "source":
        settings = _source_settings(rest, has_checkpoint=has_checkpoint, has_heartbeat=has_heartbeat)
        ignored += sorted(set(rest) - set(settings))
    else:
        owned = _OWNED[kind]
        settings = {k: v for k, v in rest.items() if k in owned}
        for switch in _SWITCHES[kind]:
            settings.setdefault(switch, "true" if switch.startswith("emit.") else "false")
        ignored += sorted(k for k in rest if k not in owned)
    return ConnectorPlan(kind, source, target, clusters, settings, tuple(ignored))


def _source_settings(rest: Mapping[str, str], *, has_checkpoint: bool, has_heartbeat: bool) -> dict[str, str]:
    settings = dict(rest)
    aux: tuple[tuple[Kind, bool], ...] = (("checkpoint", has_checkpoint), ("heartbeat", has_heartbeat))
    for kind, present in aux:
        if present:  # that connector's settings are its own
            settings = {k: v for k, v in settings.items() if k not in _OWNED[kind]}
        else:
            for switch in _SWITCHES[kind]:
                settings.setdefault(switch, "false")
    return settings


def released_settings(kind: Kind) -> dict[str, str]:
    """The flow settings that deleting a checkpoint or heartbeat connector leaves behind."""
    return dict.fromkeys(_SWITCHES.get(kind, ()), "false")


def connector_patch(kind: Kind, settings: Mapping[str, str], keep: frozenset[str] = frozenset()) -> FlowPatch:
    """What a connector's config does to a flow's settings: a MirrorSourceConnector's replaces every
    setting given at run time before except ``keep`` (those of its pair's checkpoint and heartbeat
    connectors); a checkpoint or heartbeat connector's replaces the settings it owns."""
    forget = Forget(all_but=keep) if kind == "source" else Forget(names=owned_keys(kind))
    return FlowPatch(values=dict(settings), forget=forget)


def owned_keys(kind: Kind) -> frozenset[str]:
    """The flow settings a checkpoint or heartbeat connector owns (none for a source connector)."""
    return _OWNED.get(kind, frozenset())


def flow_connector_config(flow: FlowConfig) -> dict[str, str]:
    """A MirrorSourceConnector config describing a flow that was not created as a connector."""
    return {
        "connector.class": CLASSES["source"],
        "source.cluster.alias": flow.source,
        "target.cluster.alias": flow.target,
        "source.cluster.bootstrap.servers": flow.source_cluster.bootstrap_servers,
        "target.cluster.bootstrap.servers": flow.target_cluster.bootstrap_servers,
        "topics": ",".join(flow.topics),
        "topics.exclude": ",".join(flow.topics_exclude),
        "tasks.max": str(flow.tasks_max),
        "replication.policy.class": flow.replication_policy_class,
        "replication.policy.separator": flow.replication_policy_separator,
    }
