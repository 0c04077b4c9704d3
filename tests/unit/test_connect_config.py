"""MirrorMaker 2 connector configs (Kafka Connect) mapped onto flow settings: the pure mapping."""

from __future__ import annotations

import pytest

from mm2py.config.models import MirrorMakerConfig
from mm2py.rest_api.connect.config import (
    ConnectorConfigError,
    connector_kind,
    flow_connector_config,
    plan_connector,
    released_settings,
)
from mm2py.runtime.steering import cluster_keys, flow_keys, layered

SOURCE = {
    "connector.class": "org.apache.kafka.connect.mirror.MirrorSourceConnector",
    "source.cluster.alias": "east",
    "target.cluster.alias": "west",
    "source.cluster.bootstrap.servers": "east:9092",
    "source.cluster.security.protocol": "SSL",
    "target.cluster.bootstrap.servers": "west:9092",
    "topics": "orders.*, payments",
    "topics.exclude": "orders.tmp",
    "tasks.max": "3",
    "replication.policy.separator": "_",
    "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
    "name": "mm2-source",
}


def test_a_source_connector_is_the_flow_with_its_clusters_and_settings() -> None:
    plan = plan_connector(SOURCE)
    assert (plan.kind, plan.flow) == ("source", "east->west")
    assert plan.clusters == {
        "east": {"bootstrap.servers": "east:9092", "security.protocol": "SSL"},
        "west": {"bootstrap.servers": "west:9092"},
    }
    assert plan.settings == {
        "topics": "orders.*, payments", "topics.exclude": "orders.tmp", "tasks.max": "3",
        "replication.policy.separator": "_",
        # alone, as in Connect, it emits neither checkpoints nor heartbeats
        "emit.checkpoints.enabled": "false", "sync.group.offsets.enabled": "false",
        "emit.heartbeats.enabled": "false",
    }
    assert plan.ignored == ("key.converter", "name")


def test_the_mapped_settings_make_the_flow_the_connector_describes() -> None:
    base = MirrorMakerConfig.from_flat({"clusters": "east", "east.bootstrap.servers": "east:9092"})
    plan = plan_connector(SOURCE)
    keys = cluster_keys(base, plan.clusters)
    keys.update(flow_keys(plan.flow, {**plan.settings, "enabled": True}))
    flow = layered(dict(base.source_keys), keys).flows["east->west"]
    assert flow.enabled and flow.tasks_max == 3 and flow.topics == ("orders.*", "payments")
    assert flow.replication_policy().format_remote_topic("east", "orders") == "east_orders"
    assert not flow.emit_checkpoints_enabled and not flow.emit_heartbeats_enabled
    assert flow.target_cluster.bootstrap_servers == "west:9092"
    assert flow_connector_config(flow)["topics"] == "orders.*,payments"


def test_explicit_keys_win_and_existing_checkpoint_or_heartbeat_connectors_keep_theirs() -> None:
    plan = plan_connector({**SOURCE, "emit.checkpoints.enabled": "true"})
    assert plan.settings["emit.checkpoints.enabled"] == "true"
    plan = plan_connector({**SOURCE, "groups": "g.*", "emit.heartbeats.interval.seconds": "5"},
                          has_checkpoint=True, has_heartbeat=True)
    assert not {"emit.checkpoints.enabled", "groups", "emit.heartbeats.enabled",
                "emit.heartbeats.interval.seconds"} & set(plan.settings)
    assert {"groups", "emit.heartbeats.interval.seconds"} <= set(plan.ignored)


def test_checkpoint_and_heartbeat_connectors_own_their_settings_only() -> None:
    checkpoint = plan_connector({
        "connector.class": "MirrorCheckpointConnector", "source.cluster.alias": "east",
        "target.cluster.alias": "west", "groups": "app-.*", "sync.group.offsets.enabled": True,
        "emit.checkpoints.interval.seconds": 5, "replication.policy.class": "IdentityReplicationPolicy",
    })
    assert checkpoint.kind == "checkpoint" and checkpoint.clusters == {}
    assert checkpoint.settings == {
        "groups": "app-.*", "sync.group.offsets.enabled": "true", "emit.checkpoints.interval.seconds": "5",
        "emit.checkpoints.enabled": "true"}
    assert checkpoint.ignored == ("replication.policy.class",)
    heartbeat = plan_connector({"connector.class": "MirrorHeartbeatConnector", "source.cluster.alias": "a",
                                "target.cluster.alias": "b", "topics": "x"})
    assert heartbeat.settings == {"emit.heartbeats.enabled": "true"} and heartbeat.ignored == ("topics",)
    assert released_settings("checkpoint") == {"emit.checkpoints.enabled": "false",
                                               "sync.group.offsets.enabled": "false"}
    assert released_settings("heartbeat") == {"emit.heartbeats.enabled": "false"}


@pytest.mark.parametrize("config,key,text", [
    ({"connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector"}, "connector.class",
     "not supported"),
    ({"source.cluster.alias": "a"}, "connector.class", "missing"),
    ({**SOURCE, "source.cluster.alias": ""}, "source.cluster.alias", "missing"),
    ({k: v for k, v in SOURCE.items() if k != "target.cluster.alias"}, "target.cluster.alias", "missing"),
    ({**SOURCE, "target.cluster.alias": "east"}, "target.cluster.alias", "must differ"),
    ({**SOURCE, "transforms": "route"}, "transforms", "Single Message Transforms"),
    ({**SOURCE, "topics": {"a": 1}}, "topics", "strings"),
])
def test_configs_that_cannot_be_mapped_are_refused_naming_the_key(
    config: dict[str, object], key: str, text: str
) -> None:
    with pytest.raises(ConnectorConfigError, match=text) as err:
        plan_connector(config)
    assert err.value.key == key


def test_class_names_full_or_simple() -> None:
    assert connector_kind({"connector.class": "MirrorHeartbeatConnector"}) == "heartbeat"
    assert connector_kind({"connector.class": "org.apache.kafka.connect.mirror.MirrorCheckpointConnector"}) \
        == "checkpoint"
