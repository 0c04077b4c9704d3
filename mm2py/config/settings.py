"""The settings of one flow, by MirrorMaker 2's names and with its defaults: ``FlowSettings``.

Names and defaults are MM2's (MirrorSourceConfig, MirrorCheckpointConfig, MirrorHeartbeatConfig,
MirrorConnectorConfig, Default*Filter), then mm2py's own (``mm2py.*``); ``mm2py/config/models.py``
builds flows, clusters and the whole configuration on them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from mm2py.config.errors import ConfigError
from mm2py.config.filters import (
    CONFIG_PROPERTIES_EXCLUDE_DEFAULT,
    GROUPS_DEFAULT,
    GROUPS_EXCLUDE_DEFAULT,
    TOPICS_DEFAULT,
    TOPICS_EXCLUDE_DEFAULT,
    PatternList,
    PatternTuple,
    split_list,
)
from mm2py.config.policy import DEFAULT_POLICY_CLASS, policy_from_config

__all__ = ["FILTER_CLASSES", "FlowSettings", "ReplicationFactor"]

_MIB = 1024 * 1024


ReplicationFactor = Annotated[int, Field(ge=-1, le=32767)]


FILTER_CLASSES = {
    "topic_filter_class": "org.apache.kafka.connect.mirror.DefaultTopicFilter",
    "group_filter_class": "org.apache.kafka.connect.mirror.DefaultGroupFilter",
    "config_property_filter_class": "org.apache.kafka.connect.mirror.DefaultConfigPropertyFilter",
}


class FlowSettings(BaseModel):
    """MM2 connector-level settings of one flow, by their MM2 names (aliases)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    enabled: bool = False
    topics: PatternTuple = split_list(TOPICS_DEFAULT)
    topics_exclude: PatternTuple = Field(split_list(TOPICS_EXCLUDE_DEFAULT), alias="topics.exclude")
    groups: PatternTuple = split_list(GROUPS_DEFAULT)
    groups_exclude: PatternTuple = Field(split_list(GROUPS_EXCLUDE_DEFAULT), alias="groups.exclude")
    config_properties_exclude: PatternTuple = Field(
        split_list(CONFIG_PROPERTIES_EXCLUDE_DEFAULT), alias="config.properties.exclude"
    )
    use_defaults_from: Literal["source", "target"] = Field("target", alias="use.defaults.from")
    replication_policy_class: str = Field(DEFAULT_POLICY_CLASS, alias="replication.policy.class")
    replication_policy_separator: str = Field(".", alias="replication.policy.separator", min_length=1)
    internal_topic_separator_enabled: bool = Field(
        True, alias="replication.policy.internal.topic.separator.enabled"
    )
    tasks_max: int = Field(1, alias="tasks.max", ge=1)
    refresh_topics_enabled: bool = Field(True, alias="refresh.topics.enabled")
    refresh_topics_interval_seconds: int = Field(600, alias="refresh.topics.interval.seconds")
    refresh_groups_enabled: bool = Field(True, alias="refresh.groups.enabled")
    refresh_groups_interval_seconds: int = Field(600, alias="refresh.groups.interval.seconds")
    emit_checkpoints_enabled: bool = Field(True, alias="emit.checkpoints.enabled")
    emit_checkpoints_interval_seconds: int = Field(60, alias="emit.checkpoints.interval.seconds")
    emit_heartbeats_enabled: bool = Field(True, alias="emit.heartbeats.enabled")
    emit_heartbeats_interval_seconds: int = Field(1, alias="emit.heartbeats.interval.seconds")
    heartbeats_replication_enabled: bool = Field(True, alias="heartbeats.replication.enabled")
    sync_topic_configs_enabled: bool = Field(True, alias="sync.topic.configs.enabled")
    sync_topic_configs_interval_seconds: int = Field(600, alias="sync.topic.configs.interval.seconds")
    sync_topic_acls_enabled: bool = Field(True, alias="sync.topic.acls.enabled")
    sync_topic_acls_interval_seconds: int = Field(600, alias="sync.topic.acls.interval.seconds")
    sync_group_offsets_enabled: bool = Field(False, alias="sync.group.offsets.enabled")
    sync_group_offsets_interval_seconds: int = Field(60, alias="sync.group.offsets.interval.seconds")
    replication_factor: ReplicationFactor = Field(2, alias="replication.factor")
    offset_syncs_topic_location: Literal["source", "target"] = Field(
        "source", alias="offset-syncs.topic.location"
    )
    offset_syncs_topic_replication_factor: ReplicationFactor = Field(
        3, alias="offset-syncs.topic.replication.factor"
    )
    checkpoints_topic_replication_factor: ReplicationFactor = Field(
        3, alias="checkpoints.topic.replication.factor"
    )
    heartbeats_topic_replication_factor: ReplicationFactor = Field(
        3, alias="heartbeats.topic.replication.factor"
    )
    #: the progress topic ``mm2-offsets.<source>.internal`` as mm2py creates it when missing: the
    #: Connect worker's keys and defaults, so an MM2 started later finds the topic it would have
    #: made (replication factor None: checkpoints.topic.replication.factor's, mm2py's earlier rule)
    offset_storage_partitions: int = Field(25, alias="offset.storage.partitions", ge=1)
    offset_storage_replication_factor: ReplicationFactor | None = Field(
        None, alias="offset.storage.replication.factor"
    )
    offset_lag_max: int = Field(100, alias="offset.lag.max", ge=0)
    emit_offset_syncs_enabled: bool = Field(True, alias="emit.offset-syncs.enabled")
    admin_timeout_ms: int = Field(60_000, alias="admin.timeout.ms", ge=0)
    consumer_poll_timeout_ms: int = Field(1_000, alias="consumer.poll.timeout.ms", ge=0)
    topic_filter_class: str = Field(FILTER_CLASSES["topic_filter_class"], alias="topic.filter.class")
    group_filter_class: str = Field(FILTER_CLASSES["group_filter_class"], alias="group.filter.class")
    config_property_filter_class: str = Field(
        FILTER_CLASSES["config_property_filter_class"], alias="config.property.filter.class"
    )
    # mm2py-specific
    #: every run sync (where D - U changes) also on mm2py's compacted sync history topic, one key
    #: each, so that any offset within the source's retention translates exactly
    #: (``engine/sync_history.py``); pruned every ``...prune.interval.seconds`` (first soon after start)
    offset_sync_history_enabled: bool = Field(True, alias="mm2py.offset.sync.history.enabled")
    offset_sync_history_prune_interval_seconds: int = Field(
        600, alias="mm2py.offset.sync.history.prune.interval.seconds", ge=1)
    max_inflight_bytes_per_task: int = Field(64 * _MIB, alias="mm2py.max.inflight.bytes.per.task", ge=1)
    fetch_max_bytes: int = Field(50 * _MIB, alias="mm2py.fetch.max.bytes", ge=1)
    #: after a fetch that brought less than ``mm2py.fetch.linger.bytes``, the next one starts this
    #: much later (trickling traffic: fewer, fuller requests for at most this much added latency)
    fetch_linger_ms: float = Field(2.0, alias="mm2py.fetch.linger.ms", ge=0, le=1000)
    fetch_linger_bytes: int = Field(16 * 1024, alias="mm2py.fetch.linger.bytes", ge=0)
    #: ... or this much per partition fetched, if longer (a broker reads every partition of a
    #: fetch session for each fetch: thousands of idle partitions are not read hundreds of times
    #: a second)
    fetch_linger_partition_us: float = Field(25.0, alias="mm2py.fetch.linger.partition.us", ge=0,
                                             le=10_000)
    #: ... counting at least this many partitions (a process holding part of a flow paces as one
    #: holding all of it: the Spark driver sets the flow's partition count on its mirror hosts)
    fetch_linger_partitions_min: int = Field(0, alias="mm2py.fetch.linger.partitions.min", ge=0)
    #: incremental fetch sessions (KIP-227) with the source brokers; false: every fetch names every
    #: partition (for a broker that misbehaves with sessions)
    fetch_sessions_enabled: bool = Field(True, alias="mm2py.fetch.sessions.enabled")
    #: merge runs of consecutive small batches of a partition (see mm2py.protocol.coalesce);
    #: false mirrors every batch as it came (byte-identical records sections)
    coalesce_enabled: bool = Field(True, alias="mm2py.coalesce.enabled")
    coalesce_threshold_bytes: int = Field(8 * 1024, alias="mm2py.coalesce.threshold.bytes", ge=0)
    coalesce_target_bytes: int = Field(64 * 1024, alias="mm2py.coalesce.target.bytes", ge=1,
                                       le=16 * _MIB)
    #: LZ4 level of merged lz4 batches: 0-2 LZ4's fast mode (librdkafka's default), 3-12 its
    #: high-compression mode (Kafka's Java producer defaults to 9): smaller batches, more CPU
    coalesce_lz4_level: int = Field(0, alias="mm2py.coalesce.lz4.level", ge=0, le=12)
    #: connections to each target broker that a task's produce requests go out on (a partition
    #: keeps one): a broker works on one request per connection at a time, so with two it
    #: validates and appends two of ours at once; 1 is the Java producer's single connection
    #: (the bounds are ProducerConfig's, MAX_CONNECTIONS_PER_BROKER and MAX_WINDOW, written out so
    #: that reading a config does not import the producer; test_client_settings ties them)
    produce_connections_per_broker: int = Field(2, alias="mm2py.produce.connections.per.broker",
                                                ge=1, le=8)
    #: batches of one partition in flight to the target (the window; 16 moves 3.2 times the bytes
    #: per round trip of the Java producer's 5). The broker recognises a re-sent batch among the
    #: last five of ours only, so after a failure that left more than five unanswered the task
    #: restarts and resumes from the target's tail instead of re-sending; 5 never needs that
    produce_inflight_batches: int = Field(16, alias="mm2py.produce.inflight.batches", ge=1, le=32)
    #: every broker of a cluster refusing connections this long fails an admin call (a flow's
    #: start, a REST request) at once with the broker's reason, instead of after admin.timeout.ms
    unreachable_timeout_ms: int = Field(5_000, alias="mm2py.unreachable.timeout.ms", ge=0)
    #: a flow whose cluster was unreachable at start is started again this long after, then twice
    #: as long after each further failure, up to ``mm2py.start.retry.backoff.max.ms``
    start_retry_backoff_ms: int = Field(5_000, alias="mm2py.start.retry.backoff.ms", ge=1)
    start_retry_backoff_max_ms: int = Field(60_000, alias="mm2py.start.retry.backoff.max.ms", ge=1)
    #: with sync.group.offsets.enabled: each source group commit is checkpointed and synced to the
    #: target as soon as it is mirrored (connectors/live_sync.py), new groups at their first
    #: commit; the interval settings stay upper bounds. false: only the periodic rounds, as MM2
    sync_group_offsets_live: bool = Field(True, alias="mm2py.sync.group.offsets.live")
    #: where the live sync learns of commits: ``auto`` follows the source's __consumer_offsets
    #: (polling when the cluster refuses it), ``poll`` never reads that topic
    sync_group_offsets_live_mode: Literal["auto", "poll"] = Field(
        "auto", alias="mm2py.sync.group.offsets.live.mode")
    #: polling: the groups' committed offsets are read this often (and the groups listed every ten)
    sync_group_offsets_live_poll_ms: int = Field(500, alias="mm2py.sync.group.offsets.live.poll.ms",
                                                 ge=10, le=60_000)
    #: what a task does on each alarm (mm2py/engine/losses.py): ``fail`` stops it until its flow is
    #: restarted (two incarnations of a topic are never mixed), ``skip`` counts, logs and goes on
    alarm_source_deleted: Literal["fail", "skip"] = Field("skip", alias="mm2py.alarm.source.deleted")
    alarm_source_truncated: Literal["fail", "skip"] = Field("fail", alias="mm2py.alarm.source.truncated")
    alarm_source_recreated: Literal["fail", "skip"] = Field("fail", alias="mm2py.alarm.source.recreated")
    alarm_target_truncated: Literal["fail", "skip"] = Field("fail", alias="mm2py.alarm.target.truncated")
    alarm_target_foreign: Literal["fail", "skip"] = Field("skip", alias="mm2py.alarm.target.foreign")
    #: a record the target topic refuses even alone (over its max.message.bytes): ``fail`` holds
    #: that partition (the others go on) until the flow is restarted, ``skip`` leaves the record out
    alarm_target_too_large: Literal["fail", "skip"] = Field("fail", alias="mm2py.alarm.target.too.large")
    #: false: acknowledged batches' target offsets are not compared with where the last batch ended
    #: (no target.* alarm, no verified batches counted). For measuring what the comparison costs
    #: (benchmarks/README.md); the source-side alarms and every CRC check stay
    verify_enabled: bool = Field(True, alias="mm2py.verify.enabled")

    @field_validator("topics", "topics_exclude", "groups", "groups_exclude",
                     "config_properties_exclude")  # fmt: skip
    @classmethod
    def _patterns_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        try:
            PatternList(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("topic_filter_class", "group_filter_class", "config_property_filter_class")
    @classmethod
    def _only_default_filters(cls, value: str, info: ValidationInfo) -> str:
        default = FILTER_CLASSES[str(info.field_name)]
        if value not in (default, default.rsplit(".", 1)[1]):
            raise ValueError(f"custom filter classes are not supported; use {default}")
        return default

    @field_validator("replication_policy_class")
    @classmethod
    def _policy_known(cls, value: str) -> str:
        policy_from_config(value, ".")  # raises ValueError naming the class
        return value

    @classmethod
    def setting_names(cls) -> frozenset[str]:
        """The MM2 names of all settings (``topics``, ``tasks.max``, ...)."""
        return frozenset(f.alias or name for name, f in cls.model_fields.items())
