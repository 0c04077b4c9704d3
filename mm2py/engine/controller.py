"""The controller of one flow: discovers source topics, creates target topics, assigns partitions.

Like MM2's MirrorSourceConnector it lists topics on the source, keeps those the topic filter and
the replication policy allow (internal topics and cycles refused), creates the renamed topics on
the target with the same partition count and the source's configs (through the config property
filter, whether or not periodic config sync is on), grows them when the source grows, and
spreads source partitions over tasks with a balanced, sticky assignment. It never subscribes to
anything: no consumer group exists on the source, so a topic change causes no rebalance.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from mm2py.config.filters import ConfigPropertyFilter, TopicFilter
from mm2py.config.policy import ReplicationPolicy, is_cycle
from mm2py.engine.assignment import assign
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin, TopicInfo, TopicSpec

log = logging.getLogger(__name__)

#: Target topics keep the source's batches as they are only when the broker does not recompress.
TARGET_FIXED_CONFIGS = {"compression.type": "producer"}


@dataclass
class Plan:
    """The outcome of one refresh."""

    topics: dict[str, str]  # source topic -> target topic
    partitions: list[TopicPartition]
    assignment: dict[int, list[TopicPartition]]
    created: list[str] = field(default_factory=list)
    grown: dict[str, int] = field(default_factory=dict)
    refused_cycles: list[str] = field(default_factory=list)
    #: remote topics with fewer partitions than their source that could not be grown:
    #: remote topic -> (its partitions, the source's, why growing it was refused)
    short: dict[str, tuple[int, int, str]] = field(default_factory=dict)

    def task_count(self) -> int:
        return len(self.assignment)


class Controller:
    def __init__(
        self,
        source_alias: str,
        target_alias: str,
        source_admin: ClusterAdmin,
        target_admin: ClusterAdmin,
        *,
        topic_filter: TopicFilter,
        policy: ReplicationPolicy,
        tasks_max: int = 1,
        sync_topic_configs: bool = True,
        config_filter: ConfigPropertyFilter | None = None,
        replication_factor: int = -1,
        replicate_heartbeats: bool = True,
        claimed_by: Callable[[str], str | None] | None = None,
    ) -> None:
        """``claimed_by``: the older flow of the same pair that mirrors a topic, if any (several
        flows per pair: a topic both would select stays the older one's; the worker knows them)."""
        self.source_alias = source_alias
        self.target_alias = target_alias
        self.source_admin = source_admin
        self.target_admin = target_admin
        self.policy = policy
        self.tasks_max = tasks_max
        self.sync_topic_configs = sync_topic_configs
        self.config_filter = config_filter or ConfigPropertyFilter.from_config()
        self.replication_factor = replication_factor
        self.replicate_heartbeats = replicate_heartbeats
        self._filter = topic_filter
        #: the older flow of the same pair that mirrors a topic, if any
        self.claimed_by: Callable[[str], str | None] = claimed_by or _unclaimed
        self._lock = threading.Lock()
        self._assignment: dict[int, list[TopicPartition]] = {}
        self._synced_configs: dict[str, dict[str, str]] = {}
        self._ceded: set[str] = set()  # topics left to an older flow (logged once)
        #: remote topics the target refused to grow, as last named (SHORT_NAMED: once per reason)
        self._short_named: dict[str, tuple[int, str]] = {}
        #: discovery rounds completed (each saw the topics of both clusters as they were then)
        self.refreshes = 0

    # -- runtime changes (REST) -----------------------------------------------------------------
    @property
    def topic_filter(self) -> TopicFilter:
        return self._filter

    def set_topic_filter(self, topic_filter: TopicFilter) -> None:
        """Swap the allow/deny lists; the next refresh applies them."""
        with self._lock:
            self._filter = topic_filter

    # -- decisions -----------------------------------------------------------------------------
    def target_topic(self, source_topic: str) -> str:
        return self.policy.format_remote_topic(self.source_alias, source_topic)

    def should_replicate(self, topic: str) -> bool:
        """MM2's rule: the filter allows it (heartbeats always, unless heartbeats.replication.enabled
        is false), it is not internal, and it is not a cycle; and no older flow of the pair
        mirrors it (:attr:`claimed_by`)."""
        return self.selects(topic) and self.claimed_by(topic) is None

    def selects(self, topic: str) -> bool:
        """MM2's rule alone (:meth:`should_replicate` without the other flows of the pair)."""
        return mm2_selects(topic, self.policy, self._filter, self.target_alias, self.replicate_heartbeats)

    def refresh(self) -> Plan:
        """One discovery round (blocking admin calls), MM2's steps in its order: select the source
        topics, create the missing remote topics, grow the ones the source grew, sync configs (when
        ``sync.topic.configs.enabled``), assign the partitions to tasks."""
        source_topics = self.source_admin.list_topics()
        selected, cycles = self.select_topics(source_topics)
        target_topics = self.target_admin.list_topics()
        missing = [s for s, t in selected.items() if t not in target_topics]
        # the source's configs: of every selected topic for the periodic sync, else only of the
        # topics about to be created (MM2's createNewTopics copies them whatever the sync says)
        wanted = selected if self.sync_topic_configs else {s: selected[s] for s in missing}
        configs = self._source_configs(wanted) if wanted else {}
        created = self.create_topics(source_topics, selected, missing, configs)
        grown, short = self.grow_topics(source_topics, target_topics, selected)
        if self.sync_topic_configs:
            self.sync_configs(target_topics, selected, configs)
        partitions, assignment = self.assign_partitions(source_topics, selected)
        if created:
            log.info("%s->%s: created %s", self.source_alias, self.target_alias, ", ".join(created))
        self.refreshes += 1
        return Plan(selected, partitions, assignment, created, grown, cycles, short)

    def select_topics(self, source_topics: Mapping[str, TopicInfo]) -> tuple[dict[str, str], list[str]]:
        """Step 1: the source topics this flow mirrors (source -> remote name), and the cycles the
        filter would allow but the replication policy refuses. A topic an older flow of the pair
        mirrors is left to it (logged once)."""
        selected: dict[str, str] = {}
        cycles = []
        for name in sorted(source_topics):
            if self.should_replicate(name):
                selected[name] = self.target_topic(name)
            elif self.selects(name) and name not in self._ceded:
                self._ceded.add(name)
                log.warning("%s->%s: topic %r matches this flow's filter too; flow %r, the older, "
                            "mirrors it", self.source_alias, self.target_alias, name, self.claimed_by(name))
            elif is_cycle(self.policy, name, self.target_alias) and self._filter.should_replicate(name):
                cycles.append(name)
        return selected, cycles

    def create_topics(self, source_topics: Mapping[str, TopicInfo], selected: Mapping[str, str],
                      missing: Sequence[str], configs: Mapping[str, Mapping[str, str]]) -> list[str]:
        """Step 2: create the remote topics of ``missing`` (source names) with the source's partition
        count and its configs through the config property filter (as MM2 creates them, whether or
        not periodic sync is on), plus :data:`TARGET_FIXED_CONFIGS`. A remote topic that exists is
        never touched here. Returns the names created."""
        created = self.target_admin.create_topics(
            TopicSpec(selected[s], source_topics[s].partitions, self.replication_factor,
                      {**configs.get(s, {}), **TARGET_FIXED_CONFIGS})
            for s in missing
        )
        for s in missing:
            self._synced_configs[selected[s]] = dict(configs.get(s, {}))
        return created

    def grow_topics(self, source_topics: Mapping[str, TopicInfo], target_topics: Mapping[str, TopicInfo],
                    selected: Mapping[str, str]) -> tuple[dict[str, int], dict[str, tuple[int, int, str]]]:
        """Step 3: remote topics with fewer partitions than their source grown to its count
        (partitions are never removed). Returns remote topic -> new count, and the remote topics
        the target refused to grow (SHORT_NAMED: each named in the log with its missing partitions
        once per reason; their source partitions past the remote count stay assigned, and their
        tasks name them as refused, UNKNOWN_TOPIC_OR_PARTITION: nothing goes to another partition)."""
        grow = {
            t: source_topics[s].partitions
            for s, t in selected.items()
            if t in target_topics and target_topics[t].partitions < source_topics[s].partitions
        }
        refused = self.target_admin.add_partitions(grow) or {}
        short = {t: (target_topics[t].partitions, grow[t], why) for t, why in refused.items() if t in grow}
        for t, (have, want, why) in short.items():
            if self._short_named.get(t) != (want, why):
                self._short_named[t] = (want, why)
                log.warning("%s->%s: remote topic %s has %d partitions, its source %d: partitions %s are "
                            "not mirrored until it is grown (adding them was refused: %s); add them on "
                            "the target, or grant the mirror's principal ALTER on the topic",
                            self.source_alias, self.target_alias, t, have, want,
                            f"{have}..{want - 1}" if want - have > 1 else str(have), why)
        return {t: n for t, n in grow.items() if t not in refused}, short

    def sync_configs(self, target_topics: Mapping[str, TopicInfo], selected: Mapping[str, str],
                     configs: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
        """Step 4 (``sync.topic.configs.enabled``): set on each existing remote topic the source's
        filtered configs that changed since this controller last set them. Returns what was set."""
        changed = {
            selected[s]: dict(cfg) for s, cfg in configs.items()
            if selected[s] in target_topics and self._synced_configs.get(selected[s]) != cfg
        }
        self.target_admin.alter_topic_configs(changed)
        self._synced_configs.update(changed)
        return changed

    def assign_partitions(self, source_topics: Mapping[str, TopicInfo], selected: Mapping[str, str]
                          ) -> tuple[list[TopicPartition], dict[int, list[TopicPartition]]]:
        """Step 5: every partition of the selected topics spread over at most ``tasks.max`` tasks,
        balanced and sticky (a partition stays with its task while it can)."""
        partitions = [TopicPartition(s, p) for s in selected for p in range(source_topics[s].partitions)]
        with self._lock:
            self._assignment = assign(partitions, self.tasks_max, self._assignment)
            return partitions, {k: list(v) for k, v in self._assignment.items()}

    def _source_configs(self, selected: Iterable[str]) -> dict[str, dict[str, str]]:
        raw = self.source_admin.topic_configs(selected)
        return {
            topic: {
                k: v for k, v in cfg.items()
                if self.config_filter.should_replicate(k) and k not in TARGET_FIXED_CONFIGS
            }
            for topic, cfg in raw.items()
        }

    @property
    def assignment(self) -> dict[int, list[TopicPartition]]:
        with self._lock:
            return {k: list(v) for k, v in self._assignment.items()}


def mm2_selects(topic: str, policy: ReplicationPolicy, topic_filter: TopicFilter, target_alias: str,
                replicate_heartbeats: bool) -> bool:
    """MM2's rule for a source topic: the filter allows it (heartbeats always, unless
    ``replicate_heartbeats`` is false), it is not internal, and it is not a cycle."""
    heartbeats = policy.is_heartbeats_topic(topic)
    if heartbeats and not replicate_heartbeats:
        return False
    if policy.is_internal_topic(topic) and not heartbeats:
        return False
    if not (topic_filter.should_replicate(topic) or heartbeats):
        return False
    return not is_cycle(policy, topic, target_alias)


def _unclaimed(_topic: str) -> str | None:
    return None


def partitions_of(
    assignment: Mapping[int, Sequence[TopicPartition]], task_id: int
) -> tuple[TopicPartition, ...]:
    return tuple(assignment.get(task_id, ()))
