"""Replication policies: how remote topics are named, and which topics are internal.

Semantics follow MirrorMaker 2's ``ReplicationPolicy`` / ``DefaultReplicationPolicy`` /
``IdentityReplicationPolicy`` (connect/mirror-client), including their quirks:

* ``DefaultReplicationPolicy.topic_source`` splits on the separator like Java's ``String.split``
  (trailing empty parts dropped), so ``"a.b.c"`` has source ``"a"`` and upstream ``"b.c"``, while
  ``"foo."`` is not a remote topic.
* Internal topic names (offset syncs, checkpoints) use the separator too, unless
  ``internal_topic_separator_enabled`` is false (then ``"."``).
* ``IdentityReplicationPolicy`` keeps names unchanged, except for topics that merely *end with*
  the heartbeats topic name: those are treated as the default policy would (so heartbeats still
  flow as ``<source>.heartbeats``). Its ``topic_source`` answers the configured
  ``source_cluster_alias`` (MM2 passes the flow's source alias) for every other topic.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

__all__ = [
    "DEFAULT_POLICY_CLASS",
    "IDENTITY_POLICY_CLASS",
    "DefaultReplicationPolicy",
    "IdentityReplicationPolicy",
    "ReplicationPolicy",
    "is_cycle",
    "policy_from_config",
]

DEFAULT_POLICY_CLASS = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY_CLASS = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
HEARTBEATS_TOPIC = "heartbeats"
_MAX_HOPS = 1000  # a guard only: real replication chains are a handful of hops


class ReplicationPolicy(ABC):
    """Defines remote topic names between a source and a target cluster."""

    @abstractmethod
    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        """Name on the target of ``topic`` replicated from ``source_alias``."""

    @abstractmethod
    def topic_source(self, topic: str) -> str | None:
        """Source cluster alias of a remote topic, or None if ``topic`` is not remote."""

    @abstractmethod
    def upstream_topic(self, topic: str) -> str | None:
        """Name of ``topic`` on the cluster it was replicated from (may itself be remote)."""

    def original_topic(self, topic: str) -> str:
        """Name of the topic at the start of its replication chain (``topic`` if not remote)."""
        current = topic
        for _ in range(_MAX_HOPS):
            upstream = self.upstream_topic(current)
            if upstream is None or upstream == current:
                return current
            current = upstream
        return current

    def heartbeats_topic(self) -> str:
        return HEARTBEATS_TOPIC

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"mm2-offset-syncs.{cluster_alias}.internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}.checkpoints.internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.heartbeats_topic() == self.original_topic(topic)

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(".checkpoints.internal")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(".internal")

    def is_internal_topic(self, topic: str) -> bool:
        """Internal topics (Kafka's, Connect's, MM2's) are never replicated."""
        return (
            self.is_mm2_internal_topic(topic)
            or topic.startswith("__")
            or topic.startswith(".")
            or topic.endswith("-internal")
            or topic.endswith(".internal")
        )


def _java_split(text: str, separator: str) -> list[str]:
    """``text.split(Pattern.quote(separator))`` as Java does it: trailing empty parts removed."""
    parts = text.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


@dataclass(frozen=True)
class DefaultReplicationPolicy(ReplicationPolicy):
    """Prefixes remote topics with ``<source alias><separator>``."""

    separator: str = "."
    internal_topic_separator_enabled: bool = True

    def __post_init__(self) -> None:
        if not self.separator:
            raise ValueError("replication.policy.separator must not be empty")

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        parts = _java_split(topic, self.separator)
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        source = self.topic_source(topic)
        if source is None:
            return None
        return topic[len(source) + len(self.separator) :]

    def _internal_separator(self) -> str:
        return self.separator if self.internal_topic_separator_enabled else "."

    def _internal_suffix(self) -> str:
        return f"{self._internal_separator()}internal"

    def _checkpoints_suffix(self) -> str:
        return f"{self._internal_separator()}checkpoints{self._internal_suffix()}"

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        sep = self._internal_separator()
        return f"mm2-offset-syncs{sep}{cluster_alias}{self._internal_suffix()}"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}{self._checkpoints_suffix()}"

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(self._checkpoints_suffix())

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(self._internal_suffix())


@dataclass(frozen=True)
class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """Keeps topic names unchanged (one-way replication / MM1 migration). Cannot detect cycles."""

    source_cluster_alias: str | None = None

    def _looks_like_heartbeat(self, topic: str) -> bool:
        return topic.endswith(self.heartbeats_topic())

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if self._looks_like_heartbeat(topic):
            return super().format_remote_topic(source_alias, topic)
        return topic

    def topic_source(self, topic: str) -> str | None:
        if self._looks_like_heartbeat(topic):
            return super().topic_source(topic)
        return self.source_cluster_alias

    def upstream_topic(self, topic: str) -> str | None:
        if self._looks_like_heartbeat(topic):
            return super().upstream_topic(topic)
        return topic


_ALIASES: dict[str, type[DefaultReplicationPolicy]] = {
    DEFAULT_POLICY_CLASS: DefaultReplicationPolicy,
    "DefaultReplicationPolicy": DefaultReplicationPolicy,
    "default": DefaultReplicationPolicy,
    IDENTITY_POLICY_CLASS: IdentityReplicationPolicy,
    "IdentityReplicationPolicy": IdentityReplicationPolicy,
    "identity": IdentityReplicationPolicy,
}


def policy_from_config(
    class_name: str = DEFAULT_POLICY_CLASS,
    separator: str = ".",
    *,
    internal_topic_separator_enabled: bool = True,
    source_cluster_alias: str | None = None,
) -> ReplicationPolicy:
    """Build a policy from MM2 settings (``replication.policy.class`` and friends).

    Accepts MM2's fully qualified class names, their simple names, and ``default`` / ``identity``.
    ``source_cluster_alias`` is only used by the identity policy.
    """
    cls = _ALIASES.get(class_name.strip())
    if cls is None:
        cls = _ALIASES.get(class_name.strip().lower())
    if cls is None:
        known = ", ".join(sorted(k for k in _ALIASES if "." in k or k.islower()))
        raise ValueError(f"unsupported replication.policy.class {class_name!r} (supported: {known})")
    if cls is IdentityReplicationPolicy:
        return IdentityReplicationPolicy(separator, internal_topic_separator_enabled, source_cluster_alias)
    return DefaultReplicationPolicy(separator, internal_topic_separator_enabled)


def is_cycle(policy: ReplicationPolicy, topic: str, target_alias: str) -> bool:
    """True if ``topic``'s replication chain already passed through ``target_alias``.

    Walks ``topic_source``/``upstream_topic`` like MM2's ``MirrorSourceConnector.isCycle``: stops
    at a non-remote topic, or when the upstream name does not change (identity policy).
    """
    current = topic
    for _ in range(_MAX_HOPS):
        source = policy.topic_source(current)
        if source is None:
            return False
        if source == target_alias:
            return True
        upstream = policy.upstream_topic(current)
        if upstream is None or upstream == current:
            return False
        current = upstream
    return False
