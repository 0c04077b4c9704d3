"""The configuration definitions of MirrorMaker 2's connectors as mm2py runs them (pure).

Kafka Connect describes a connector's settings as ``ConfigKeyInfo`` objects (``GET
/connector-plugins/{class}/config``, and each entry's ``definition`` in a validation): name, type,
whether it is required, its default as text, importance, documentation, group, order in the
group, width, display name, dependents. mm2py lists, in that shape, the keys it accepts for each
connector: Connect's own keys that it takes without effect (group ``Common`` and ``Error
Handling``, as Connect groups them), the pair's aliases and connection settings, and the flow
settings the connector maps onto, typed and defaulted from mm2py's own settings model
(``FlowSettings``), so a setting added there is listed here without further work.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mm2py.config.models import FlowSettings
from mm2py.rest_api.connect.config import CHECKPOINT_KEYS, Kind
from mm2py.runtime.worker_base import HEARTBEAT_KEYS

__all__ = ["ConfigKey", "definitions", "groups"]


@dataclass(frozen=True)
class ConfigKey:
    """One setting as Connect describes it."""

    name: str
    type: str  # BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD
    default: str | None
    required: bool = False
    importance: str = "LOW"
    documentation: str = ""
    group: str | None = None
    order: int = -1
    width: str = "NONE"

    def info(self) -> dict[str, Any]:
        """The key as Connect's REST API shows it."""
        return {"name": self.name, "type": self.type, "required": self.required,
                "default_value": self.default, "importance": self.importance,
                "documentation": self.documentation, "group": self.group, "order": self.order,
                "width": self.width, "display_name": self.name, "dependents": []}


def _common() -> list[ConfigKey]:
    """Connect's connector keys mm2py accepts: name, class and task count mean something; the
    converter, reload and error-handling keys are taken without effect (raw batches are copied)."""
    def common(order: int, name: str, type_: str, default: str | None, importance: str, doc: str,
               width: str, required: bool = False) -> ConfigKey:
        return ConfigKey(name, type_, default, required, importance, doc, "Common", order, width)

    def errors(order: int, name: str, type_: str, default: str, width: str) -> ConfigKey:
        return ConfigKey(name, type_, default, False, "MEDIUM",
                         "Accepted for Kafka Connect compatibility; mm2py copies record batches "
                         "without converting records, so there is nothing for it to tolerate.",
                         "Error Handling", order, width)

    no_effect = "Accepted for Kafka Connect compatibility; no effect (record batches are copied as they are)."
    return [
        common(1, "name", "STRING", None, "HIGH", "The connector's unique name.", "MEDIUM", True),
        common(2, "connector.class", "STRING", None, "HIGH",
               "MirrorSourceConnector, MirrorCheckpointConnector or MirrorHeartbeatConnector "
               "(full or simple class name).", "LONG", True),
        common(3, "connector.plugin.version", "STRING", None, "MEDIUM",
               "Accepted for Kafka Connect compatibility; mm2py runs one version of each connector.",
               "MEDIUM"),
        common(4, "tasks.max", "INT", "1", "HIGH",
               "How many tasks share the mirrored partitions (balanced, sticky).", "SHORT"),
        common(5, "tasks.max.enforce", "BOOLEAN", "true", "LOW",
               "Accepted for Kafka Connect compatibility; mm2py never runs more than tasks.max tasks.",
               "SHORT"),
        common(6, "key.converter", "CLASS", None, "LOW", no_effect, "SHORT"),
        common(7, "value.converter", "CLASS", None, "LOW", no_effect, "SHORT"),
        common(8, "header.converter", "CLASS", None, "LOW", no_effect, "SHORT"),
        common(9, "config.action.reload", "STRING", "restart", "LOW", no_effect, "MEDIUM"),
        errors(1, "errors.retry.timeout", "LONG", "0", "MEDIUM"),
        errors(2, "errors.retry.delay.max.ms", "LONG", "60000", "MEDIUM"),
        errors(3, "errors.tolerance", "STRING", "none", "SHORT"),
        errors(4, "errors.log.enable", "BOOLEAN", "false", "SHORT"),
        errors(5, "errors.log.include.messages", "BOOLEAN", "false", "SHORT"),
    ]


def _pair() -> list[ConfigKey]:
    return [
        ConfigKey("source.cluster.alias", "STRING", None, True, "HIGH",
                  "Alias of the cluster mirrored from."),
        ConfigKey("target.cluster.alias", "STRING", None, True, "HIGH",
                  "Alias of the cluster mirrored to."),
        ConfigKey("source.cluster.bootstrap.servers", "LIST", None, False, "HIGH",
                  "The source cluster's brokers; needed when the worker does not know its alias "
                  "yet (other source.cluster.* keys carry its TLS/SASL settings)."),
        ConfigKey("target.cluster.bootstrap.servers", "LIST", None, False, "HIGH",
                  "The target cluster's brokers; needed when the worker does not know its alias "
                  "yet (other target.cluster.* keys carry its TLS/SASL settings)."),
    ]


#: settings of MM2's that are not shaped as their Python type says
_TYPES = {"replication.factor": "INT", "offset-syncs.topic.replication.factor": "SHORT",
          "checkpoints.topic.replication.factor": "SHORT", "heartbeats.topic.replication.factor": "SHORT",
          "offset.lag.max": "LONG"}
_HIGH = frozenset({"topics", "topics.exclude", "groups", "groups.exclude", "config.properties.exclude"})
_DOCS = {
    "topics": "Topics to mirror: regular expressions, comma-separated.",
    "topics.exclude": "Topics never mirrored: regular expressions, comma-separated.",
    "groups": "Consumer groups whose offsets are checkpointed: regular expressions, comma-separated.",
    "groups.exclude": "Consumer groups never checkpointed: regular expressions, comma-separated.",
    "config.properties.exclude": "Topic configs not copied to remote topics: regular expressions.",
    "use.defaults.from": "Which cluster's broker defaults decide whether a topic config is default.",
    "replication.policy.class": "How remote topics are named: DefaultReplicationPolicy (source "
                                "alias prefix) or IdentityReplicationPolicy (same name).",
    "replication.policy.separator": "Separator between the source alias and the topic name.",
    "replication.policy.internal.topic.separator.enabled":
        "Whether internal topic names use the separator too.",
    "refresh.topics.enabled": "Whether new topics and partitions are looked for periodically.",
    "refresh.topics.interval.seconds": "Seconds between topic refreshes (negative: at start only).",
    "refresh.groups.enabled": "Whether new consumer groups are looked for periodically.",
    "refresh.groups.interval.seconds": "Seconds between consumer-group refreshes.",
    "emit.checkpoints.enabled": "Whether consumer-group offsets are translated into checkpoints.",
    "emit.checkpoints.interval.seconds": "Seconds between checkpoints.",
    "emit.heartbeats.enabled": "Whether heartbeats are written to the target.",
    "emit.heartbeats.interval.seconds": "Seconds between heartbeats.",
    "heartbeats.replication.enabled": "Whether heartbeats topics are mirrored too.",
    "sync.topic.configs.enabled": "Whether topic configs are copied to remote topics.",
    "sync.topic.configs.interval.seconds": "Seconds between topic config syncs.",
    "sync.topic.acls.enabled": "Whether topic ACLs are copied to remote topics.",
    "sync.topic.acls.interval.seconds": "Seconds between topic ACL syncs (negative: never).",
    "sync.group.offsets.enabled":
        "Whether translated offsets are committed to inactive groups on the target.",
    "sync.group.offsets.interval.seconds": "Seconds between consumer-group offset syncs.",
    "replication.factor": "Replication factor of remote topics created on the target (-1: broker default).",
    "offset-syncs.topic.location": "The cluster holding the offset-syncs topic: source or target.",
    "offset-syncs.topic.replication.factor": "Replication factor of the offset-syncs topic.",
    "checkpoints.topic.replication.factor": "Replication factor of the checkpoints topic.",
    "heartbeats.topic.replication.factor": "Replication factor of the heartbeats topic.",
    "offset.lag.max": "How far behind offset syncs may fall (mm2py writes exact syncs regardless).",
    "emit.offset-syncs.enabled": "Whether offset syncs are written (needed for checkpoints).",
    "admin.timeout.ms": "How long an admin call may take.",
    "consumer.poll.timeout.ms":
        "Accepted for compatibility (mm2py's fetcher waits as the consumer settings say).",
    "topic.filter.class": "Only the default topic filter is supported.",
    "group.filter.class": "Only the default group filter is supported.",
    "config.property.filter.class": "Only the default config-property filter is supported.",
}


def _type(name: str, annotation: Any) -> str:
    if name in _TYPES:
        return _TYPES[name]
    if name.endswith(".class"):
        return "CLASS"
    if annotation is bool:
        return "BOOLEAN"
    if annotation is int:
        return "LONG" if name.endswith((".ms", ".seconds")) else "INT"
    if annotation is float:
        return "DOUBLE"
    origin = typing.get_origin(annotation)
    if origin in (tuple, list):
        return "LIST"
    if origin in (typing.Union, types.UnionType):
        return _type(name, next(a for a in typing.get_args(annotation) if a is not type(None)))
    return "STRING"


def _text(value: Any) -> str | None:
    """A default as Connect writes it: ``true``, ``1``, ``a,b``."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value)


def _settings(names: Iterable[str]) -> list[ConfigKey]:
    fields = {f.alias or n: f for n, f in FlowSettings.model_fields.items()}
    out = []
    for name in names:
        field = fields[name]
        doc = _DOCS.get(name) or ("mm2py's own setting (see mm2py's README)." if name.startswith("mm2py.")
                                  else "A MirrorMaker 2 setting of the flow.")
        out.append(ConfigKey(name, _type(name, field.annotation), _text(field.default), False,
                             "HIGH" if name in _HIGH else "LOW", doc,
                             "mm2py" if name.startswith("mm2py.") else None))
    return out


#: flow settings that are the Connect worker's keys, not a connector's (the progress topic's layout)
WORKER_PREFIXES = ("offset.storage.",)

#: the flow settings every connector describes (the pair's naming)
_SHARED = ("replication.policy.class", "replication.policy.separator",
           "replication.policy.internal.topic.separator.enabled", "admin.timeout.ms")


def definitions(kind: Kind) -> list[ConfigKey]:
    """The keys of one kind of connector, in Connect's order (its own keys first)."""
    common = _common()
    taken = {k.name for k in common}
    names = [n for n in FlowSettings.setting_names()
             if n != "enabled" and n not in taken and not n.startswith(WORKER_PREFIXES)]
    order = {f.alias or n: i for i, (n, f) in enumerate(FlowSettings.model_fields.items())}
    if kind == "source":  # the flow itself: every setting (the others' too, while they do not exist)
        own = [n for n in names if n not in _SHARED]
    else:
        own = [n for n in names if n in (CHECKPOINT_KEYS if kind == "checkpoint" else HEARTBEAT_KEYS)]
    own.sort(key=lambda n: (n.startswith("mm2py."), order[n]))
    return [*common, *_pair(), *_settings(_SHARED), *_settings(own)]


def groups(keys: Iterable[ConfigKey]) -> list[str]:
    """The groups of ``keys`` in their order, each once."""
    return list(dict.fromkeys(k.group for k in keys if k.group is not None))
