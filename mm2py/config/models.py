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
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)

from mm2py.config.errors import ConfigError, did_you_mean
from mm2py.config.filters import (
    ConfigPropertyFilter,
    GroupFilter,
    TopicFilter,
)
from mm2py.config.flat import CLIENT_KINDS, FlatConfig, classify, flow_client_key, to_client_value
from mm2py.config.loader import ConfigSource, read_config, source_of_document
from mm2py.config.names import DEFAULT_CONNECTOR, check_flow_name, pair_name
from mm2py.config.policy import ReplicationPolicy, policy_from_config
from mm2py.config.settings import FlowSettings

__all__ = ["DEFAULT_CONNECTOR", "ClusterConfig", "FlowConfig", "FlowSettings", "MirrorMakerConfig",
           "check_flow_name", "load_config", "pair_name"]

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

    def offset_sync_history_topic(self) -> str:
        """mm2py's sync history topic, beside the offset-syncs topic (``mm2-offset-syncs.west.internal``
        -> ``mm2py-offset-sync-history.west.internal``: internal to MM2 and mm2py alike)."""
        name = self.offset_syncs_topic()
        return "mm2py-offset-sync-history" + name[len("mm2-offset-syncs"):]

    @property
    def writes_sync_history(self) -> bool:
        return self.emit_offset_syncs_enabled and self.offset_sync_history_enabled

    def checkpoints_topic(self) -> str:
        """Name of the checkpoints topic (on the target cluster)."""
        return self.replication_policy().checkpoints_topic(self.source)

    def progress_topic_layout(self) -> tuple[int, int]:
        """(partitions, replication factor) of the progress topic when mm2py creates it."""
        rf = self.offset_storage_replication_factor
        return self.offset_storage_partitions, self.checkpoints_topic_replication_factor if rf is None else rf

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
        """A copy with MM2-named settings replaced (e.g. ``{"topics": "a.*"}``), validated; only
        settings (:meth:`patched` takes client overrides too)."""
        return self.patched(updates, client_keys=False)

    def patched(self, values: Mapping[str, Any], *, client_keys: bool = True) -> FlowConfig:
        """This flow with MM2-named ``values`` over it (a patch's, :mod:`mm2py.config.patch`): each
        value validated as its setting's type, once (an error names ``<flow>.<key>``).
        ``client_keys``: client overrides (``consumer.*``, ``source.cluster.*``...) and the keys MM2
        files carry without meaning are taken as under the flow's prefix in the configuration file
        (an unnamed flow's run-time keys are that); false: settings only (a named flow's)."""
        settings: dict[str, Any] = {}
        clients: dict[str, dict[str, str]] = {}
        for key, value in values.items():
            if key in _SETTING_NAMES:
                settings[key] = value
            elif not client_keys:
                raise ConfigError(f"unknown key {key!r}{did_you_mean(key, _SETTING_NAMES)}", key)
            elif (client := flow_client_key(f"{self.name}.{key}", key, _SETTING_NAMES)) is not None:
                clients.setdefault(client[0], {})[client[1]] = to_client_value(f"{self.name}.{key}", value)
        try:
            typed = FlowSettings.model_validate(settings)
        except ValidationError as exc:
            raise _config_error(exc, {k: f"{self.name}.{k}" for k in settings}) from None
        update: dict[str, Any] = {name: getattr(typed, name) for name in typed.model_fields_set}
        if clients:
            overrides = {role: dict(props) for role, props in self.client_overrides.items()}
            for role, props in clients.items():
                overrides.setdefault(role, {}).update(props)
            update["client_overrides"] = overrides
        return self.model_copy(update=update)


def _validate_flow(data: dict[str, Any], origins: Mapping[str, str]) -> FlowConfig:
    try:
        return FlowConfig.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc, origins) from None


def _config_error(exc: ValidationError, origins: Mapping[str, str]) -> ConfigError:
    """The first problem of ``exc`` named by the key it came from (``origins``: field alias -> key)."""
    err = exc.errors()[0]
    loc = str(err["loc"][0]) if err["loc"] else ""
    key = origins.get(loc, loc)
    msg = err["msg"].removeprefix("Value error, ")
    shown = f" (got {err['input']!r})" if not isinstance(err["input"], dict) else ""
    return ConfigError(f"invalid value for {key!r}: {msg}{shown}", key)


class MirrorMakerConfig(BaseModel):
    """A whole MM2 configuration: every cluster and every ordered pair of clusters."""

    model_config = ConfigDict(frozen=True)

    clusters: dict[str, ClusterConfig]
    flows: dict[str, FlowConfig]  # "A->B" for every ordered pair of distinct clusters
    ignored_keys: tuple[str, ...] = ()
    #: what the file held that mm2py ignores, each with its reason, to list once at start (a Strimzi
    #: resource's fields: ``spec.replicas: ignored: the number of Kafka Connect pods; ...``)
    notes: tuple[str, ...] = ()
    #: the flat MM2 keys this configuration was built from (a runtime layers changes over them)
    source_keys: dict[str, Any] = Field(default_factory=dict, repr=False)

    def enabled_flows(self) -> list[FlowConfig]:
        return [f for f in self.flows.values() if f.enabled]

    def heartbeat_flows(self) -> list[FlowConfig]:
        """Pairs MM2 starts a herder for: enabled, or emitting heartbeats (MM2's default)."""
        return [f for f in self.flows.values() if f.enabled or f.emit_heartbeats_enabled]

    def flow(self, source: str, target: str) -> FlowConfig:
        try:
            return self.flows[pair_name(source, target)]
        except KeyError:
            clusters = ", ".join(self.clusters)
            raise ConfigError(f"no flow {source}->{target} (clusters: {clusters})") from None

    @classmethod
    def from_flat(cls, raw: Mapping[str, Any]) -> MirrorMakerConfig:
        """Build from flat MM2 keys, e.g. the contents of ``mm2.properties``."""
        return _build(classify(raw, _SETTING_NAMES)).model_copy(update={"source_keys": dict(raw)})

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any], secrets_dir: str | Path | None = None) -> MirrorMakerConfig:
        """Build from a YAML/JSON document (nested form, flat MM2 keys, or a mix; or a Strimzi
        ``KafkaMirrorMaker2`` resource, its Secrets read from ``secrets_dir``)."""
        return cls.from_source(source_of_document(doc, secrets_dir))

    @classmethod
    def from_source(cls, source: ConfigSource) -> MirrorMakerConfig:
        """Build from keys as read; an error about a key that came from a Strimzi resource names
        the resource's field too."""
        try:
            config = cls.from_flat(source.keys)
        except ConfigError as exc:
            origin = source.origins.get(exc.key or "")
            if origin is None:
                raise
            raise ConfigError(f"{origin}: {exc}", origin) from None
        return config.model_copy(update={"notes": source.notes}) if source.notes else config


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
            flows[pair_name(source, target)] = _validate_flow(data, origins)
    return MirrorMakerConfig(clusters=clusters, flows=flows, ignored_keys=tuple(flat.ignored))


def load_config(path: str | Path, secrets_dir: str | Path | None = None) -> MirrorMakerConfig:
    """Load ``.properties`` (mm2.properties), ``.yaml``/``.yml`` or ``.json``, which may hold a
    Strimzi ``KafkaMirrorMaker2`` resource: its Secrets are read from ``secrets_dir`` (else
    ``$MM2PY_SECRETS_DIR``, else ``/etc/mm2py/secrets``), laid out ``<dir>/<secretName>/<key>``."""
    return MirrorMakerConfig.from_source(read_config(path, secrets_dir))
