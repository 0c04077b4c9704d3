"""MirrorMaker 2 compatible configuration: clusters, flows (``A->B``) and their settings.

Setting names and defaults are MM2's (MirrorSourceConfig, MirrorCheckpointConfig,
MirrorHeartbeatConfig, MirrorConnectorConfig, Default*Filter). Notable choices:

* ``replication.factor`` defaults to 2 and the internal topics' replication factors to 3, as in
  MM2, so an existing ``mm2.properties`` behaves the same; ``-1`` means "broker default"
  (``default.replication.factor``), which mm2py accepts too.
* A flow is disabled unless ``A->B.enabled=true`` (or a top-level ``enabled=true``), as in MM2.
  In the nested YAML/JSON form, listing a flow under ``flows`` enables it unless it says otherwise.
* ``*.interval.seconds`` values below zero disable the periodic job, as in MM2.

Client settings for one flow resolve, lowest precedence first: top-level connection keys, cluster
connection keys (``A.bootstrap.servers``, ``A.security.protocol``...), ``A->B.source.cluster.*``,
flow-wide ``consumer.*`` (top level, then ``A->B.consumer.*``), ``A.consumer.*``, and finally
``A->B.source.consumer.*``. That ordering is MM2's (``A.consumer.x`` beats ``A->B.consumer.x``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from mm2py.config.errors import ConfigError, did_you_mean
from mm2py.config.filters import (
    CONFIG_PROPERTIES_EXCLUDE_DEFAULT,
    GROUPS_DEFAULT,
    GROUPS_EXCLUDE_DEFAULT,
    TOPICS_DEFAULT,
    TOPICS_EXCLUDE_DEFAULT,
    ConfigPropertyFilter,
    GroupFilter,
    PatternList,
    PatternTuple,
    TopicFilter,
    split_list,
)
from mm2py.config.flat import CLIENT_KINDS, FlatConfig, classify
from mm2py.config.loader import flatten_document, read_flat_config
from mm2py.config.names import DEFAULT_CONNECTOR, check_flow_name, pair_name
from mm2py.config.policy import DEFAULT_POLICY_CLASS, ReplicationPolicy, policy_from_config

__all__ = ["DEFAULT_CONNECTOR", "ClusterConfig", "FlowConfig", "FlowSettings", "MirrorMakerConfig",
           "check_flow_name", "load_config", "pair_name"]

_MIB = 1024 * 1024


ReplicationFactor = Annotated[int, Field(ge=-1, le=32767)]


_FILTER_CLASSES = {
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
    offset_lag_max: int = Field(100, alias="offset.lag.max", ge=0)
    emit_offset_syncs_enabled: bool = Field(True, alias="emit.offset-syncs.enabled")
    admin_timeout_ms: int = Field(60_000, alias="admin.timeout.ms", ge=0)
    consumer_poll_timeout_ms: int = Field(1_000, alias="consumer.poll.timeout.ms", ge=0)
    topic_filter_class: str = Field(_FILTER_CLASSES["topic_filter_class"], alias="topic.filter.class")
    group_filter_class: str = Field(_FILTER_CLASSES["group_filter_class"], alias="group.filter.class")
    config_property_filter_class: str = Field(
        _FILTER_CLASSES["config_property_filter_class"], alias="config.property.filter.class"
    )
    # mm2py-specific
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
        default = _FILTER_CLASSES[str(info.field_name)]
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


_SETTING_NAMES = FlowSettings.setting_names()


class ClusterConfig(BaseModel):
    """One cluster: connection settings shared by all its clients, plus per-client overrides."""

    model_config = ConfigDict(frozen=True)

    alias: str
    bootstrap_servers: str = Field(min_length=1)
    connection: dict[str, str] = {}  # security.protocol, ssl.*, sasl.* (not bootstrap.servers)
    consumer: dict[str, str] = {}
    producer: dict[str, str] = {}
    admin: dict[str, str] = {}


class FlowConfig(FlowSettings):
    """Everything one flow needs; picklable, shipped to workers. A flow mirrors ``source->target``;
    a pair may have several flows, each with its own name (``label``; ``None`` for the pair's
    unnamed flow, named ``source->target``), settings, tasks and committed positions (keyed by
    :attr:`connector_name` in the progress topic)."""

    source: str
    target: str
    source_cluster: ClusterConfig
    target_cluster: ClusterConfig
    # flow-level client overrides, keyed "consumer", "source.admin", "target.cluster", ...
    client_overrides: dict[str, dict[str, str]] = {}
    #: the flow's own name; None: the pair's unnamed flow
    label: str | None = None

    @property
    def name(self) -> str:
        return self.label if self.label is not None else self.pair

    @property
    def pair(self) -> str:
        return pair_name(self.source, self.target)

    @property
    def connector_name(self) -> str:
        """The name keying this flow's positions (Connect keys source offsets by connector name):
        MM2's ``MirrorSourceConnector`` for the pair's unnamed flow, else the flow's name."""
        return DEFAULT_CONNECTOR if self.label in (None, self.pair) else self.label

    def named(self, label: str, settings: Mapping[str, Any]) -> FlowConfig:
        """A flow of the same pair named ``label``: this one's resolved configuration with
        ``settings`` (MM2 names) over it, enabled."""
        check_flow_name(label, self.source, self.target)
        named = self.model_copy(update={"label": None if label == self.pair else label})
        return named.with_settings({**settings, "enabled": True})  # errors name "<label>.<key>"

    def replication_policy(self) -> ReplicationPolicy:
        return policy_from_config(
            self.replication_policy_class,
            self.replication_policy_separator,
            internal_topic_separator_enabled=self.internal_topic_separator_enabled,
            source_cluster_alias=self.source,
        )

    def topic_filter(self) -> TopicFilter:
        return TopicFilter.from_config(self.topics, self.topics_exclude)

    def group_filter(self) -> GroupFilter:
        return GroupFilter.from_config(self.groups, self.groups_exclude)

    def config_property_filter(self) -> ConfigPropertyFilter:
        return ConfigPropertyFilter.from_config(self.config_properties_exclude, self.use_defaults_from)

    @property
    def offset_syncs_cluster(self) -> str:
        """Alias of the cluster holding this flow's offset-syncs topic."""
        return self.source if self.offset_syncs_topic_location == "source" else self.target

    def offset_syncs_topic(self) -> str:
        other = self.target if self.offset_syncs_topic_location == "source" else self.source
        return self.replication_policy().offset_syncs_topic(other)

    def checkpoints_topic(self) -> str:
        """Name of the checkpoints topic (on the target cluster)."""
        return self.replication_policy().checkpoints_topic(self.source)

    def client_config(
        self, side: Literal["source", "target"], kind: Literal["consumer", "producer", "admin"]
    ) -> dict[str, str]:
        """Resolved properties for one client (precedence described in the module docstring)."""
        cluster = self.source_cluster if side == "source" else self.target_cluster
        props = {"bootstrap.servers": cluster.bootstrap_servers, **cluster.connection}
        props.update(self.client_overrides.get(f"{side}.cluster", {}))
        props.update(self.client_overrides.get(kind, {}))
        props.update(getattr(cluster, kind))
        props.update(self.client_overrides.get(f"{side}.{kind}", {}))
        return props

    def with_settings(self, updates: Mapping[str, Any]) -> FlowConfig:
        """A copy with MM2-named settings replaced (e.g. ``{"topics": "a.*"}``), validated."""
        for key in updates:
            if key not in _SETTING_NAMES:
                raise ConfigError(f"unknown key {key!r}{did_you_mean(key, _SETTING_NAMES)}", key)
        data = self.model_dump(by_alias=True)
        data.update(updates)
        origins = {k: f"{self.name}.{k}" for k in updates}
        return _validate_flow(data, origins)


def _validate_flow(data: dict[str, Any], origins: Mapping[str, str]) -> FlowConfig:
    try:
        return FlowConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = str(err["loc"][0]) if err["loc"] else ""
        key = origins.get(loc, loc)
        msg = err["msg"].removeprefix("Value error, ")
        shown = f" (got {err['input']!r})" if not isinstance(err["input"], dict) else ""
        raise ConfigError(f"invalid value for {key!r}: {msg}{shown}", key) from None


class MirrorMakerConfig(BaseModel):
    """A whole MM2 configuration: every cluster and every ordered pair of clusters."""

    model_config = ConfigDict(frozen=True)

    clusters: dict[str, ClusterConfig]
    flows: dict[str, FlowConfig]  # "A->B" for every ordered pair of distinct clusters
    ignored_keys: tuple[str, ...] = ()
    #: the flat MM2 keys this configuration was built from (a runtime layers changes over them)
    source_keys: dict[str, Any] = Field(default_factory=dict, repr=False)

    def enabled_flows(self) -> list[FlowConfig]:
        return [f for f in self.flows.values() if f.enabled]

    def heartbeat_flows(self) -> list[FlowConfig]:
        """Pairs MM2 starts a herder for: enabled, or emitting heartbeats (MM2's default)."""
        return [f for f in self.flows.values() if f.enabled or f.emit_heartbeats_enabled]

    def flow(self, source: str, target: str) -> FlowConfig:
        try:
            return self.flows[f"{source}->{target}"]
        except KeyError:
            clusters = ", ".join(self.clusters)
            raise ConfigError(f"no flow {source}->{target} (clusters: {clusters})") from None

    @classmethod
    def from_flat(cls, raw: Mapping[str, Any]) -> MirrorMakerConfig:
        """Build from flat MM2 keys, e.g. the contents of ``mm2.properties``."""
        return _build(classify(raw, _SETTING_NAMES)).model_copy(update={"source_keys": dict(raw)})

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any]) -> MirrorMakerConfig:
        """Build from a YAML/JSON document (nested form, flat MM2 keys, or a mix)."""
        return cls.from_flat(flatten_document(doc))


def _build(flat: FlatConfig) -> MirrorMakerConfig:
    clusters: dict[str, ClusterConfig] = {}
    for alias in flat.clusters:
        connection = {**flat.top_connection, **flat.cluster_connection.get(alias, {})}
        servers = connection.pop("bootstrap.servers", "")
        if not servers:
            raise ConfigError(
                f"missing required key '{alias}.bootstrap.servers'", f"{alias}.bootstrap.servers"
            )
        kinds = flat.cluster_clients.get(alias, {})
        clusters[alias] = ClusterConfig(
            alias=alias,
            bootstrap_servers=servers,
            connection=connection,
            **{kind: kinds.get(kind, {}) for kind in CLIENT_KINDS},
        )
    flows: dict[str, FlowConfig] = {}
    for source in flat.clusters:
        for target in flat.clusters:
            if source == target:
                continue
            values = dict(flat.top_settings)
            values.update(flat.flow_settings.get((source, target), {}))
            data: dict[str, Any] = {k: v for k, (v, _) in values.items()}
            origins = {k: origin for k, (_, origin) in values.items()}
            overrides = {k: dict(v) for k, v in flat.top_clients.items()}
            for role, props in flat.flow_clients.get((source, target), {}).items():
                overrides.setdefault(role, {}).update(props)
            data.update(
                source=source,
                target=target,
                source_cluster=clusters[source],
                target_cluster=clusters[target],
                client_overrides=overrides,
            )
            flows[f"{source}->{target}"] = _validate_flow(data, origins)
    return MirrorMakerConfig(clusters=clusters, flows=flows, ignored_keys=tuple(flat.ignored))


def load_config(path: str) -> MirrorMakerConfig:
    """Load ``.properties`` (mm2.properties), ``.yaml``/``.yml`` or ``.json``."""
    return MirrorMakerConfig.from_flat(read_flat_config(path))
