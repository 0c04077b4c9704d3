from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from mm2py.config.errors import ConfigError
from mm2py.config.models import FlowConfig, MirrorMakerConfig, load_config
from mm2py.config.policy import IdentityReplicationPolicy
from mm2py.config.properties import parse_properties

DATA = Path(__file__).parent / "data"

_BASE = {
    "clusters": "east, west",
    "east.bootstrap.servers": "e1:9092",
    "west.bootstrap.servers": "w1:9092",
}


def _flat(**extra: Any) -> MirrorMakerConfig:
    return MirrorMakerConfig.from_flat({**_BASE, **extra})


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ----------------------------------------------------------------------------- mm2.properties


def test_real_mm2_properties_file() -> None:
    cfg = load_config(str(DATA / "mm2.properties"))
    assert list(cfg.clusters) == ["primary", "backup"]
    assert [f.name for f in cfg.enabled_flows()] == ["primary->backup"]
    flow = cfg.flow("primary", "backup")
    assert flow.topics == ("orders.*", "payments", "inventory-v2")
    assert flow.groups == ("billing-.*",)
    assert flow.sync_group_offsets_enabled is True
    assert flow.emit_checkpoints_interval_seconds == 20
    assert flow.tasks_max == 4  # top-level applies to every flow
    assert flow.replication_factor == 3
    assert flow.refresh_topics_interval_seconds == 300  # whitespace separator
    assert cfg.flow("backup", "primary").tasks_max == 4
    assert not cfg.flow("backup", "primary").enabled

    backup = cfg.clusters["backup"]
    assert backup.bootstrap_servers == "backup-kafka-1:9092,backup-kafka-2:9092"
    assert backup.connection["security.protocol"] == "SASL_SSL"
    assert backup.connection["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="mm2" password="s3cr=t";'
    )
    producer = flow.client_config("target", "producer")
    assert producer["bootstrap.servers"] == backup.bootstrap_servers
    assert producer["sasl.mechanism"] == "SCRAM-SHA-512"
    assert producer["compression.type"] == "zstd"
    assert producer["linger.ms"] == "50"
    assert producer["batch.size"] == "262144"
    consumer = flow.client_config("source", "consumer")
    assert consumer == {
        "bootstrap.servers": "primary-kafka-1:9092, primary-kafka-2:9092",
        "fetch.min.bytes": "1048576",
    }
    # the Connect worker's keys of the progress topic lay it out as MM2 would (issue 31); the other
    # worker keys mean nothing to mm2py
    assert flow.progress_topic_layout() == (25, 3)
    assert "offset.storage.replication.factor" not in cfg.ignored_keys
    assert "status.storage.replication.factor" in cfg.ignored_keys
    assert "key.converter" in cfg.ignored_keys


def test_properties_parser_rules() -> None:
    text = (
        "  # comment\n"
        "! a comment line is never continued \\\n"
        "z=1\n"
        "a=1\n"
        "b : two words  \n"
        "c three\n"
        "d=line\\\n"
        "    continued\n"
        "e=tab\\there\\u0041\\\\\n"
        "key\\ with\\ space = v\n"
        "f=\n"
        "g\n"
        "a=last wins\r\n"
        "h=\\\\\n"
        "i=x\n"
    )
    assert parse_properties(text) == {
        "z": "1",
        "b": "two words  ",
        "c": "three",
        "d": "linecontinued",
        "e": "tab\thereA\\",
        "key with space": "v",
        "f": "",
        "g": "",
        "a": "last wins",
        "h": "\\",
        "i": "x",
    }


def test_properties_bad_unicode_escape() -> None:
    with pytest.raises(ConfigError, match=r"line 2"):
        parse_properties("ok=1\nbad=\\u12G4\n")


# ----------------------------------------------------------------------------- YAML / JSON


def test_nested_yaml(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "mm2.yaml",
        """
clusters:
  east:
    bootstrap.servers: e1:9092,e2:9092
    security.protocol: SSL
    consumer:
      fetch.min.bytes: 1
      check.crcs: false
  west: w1:9092
flows:
  east->west:
    topics: [orders, "pay.*"]
    tasks.max: 4
    sync.group.offsets.enabled: true
  west->east:
    enabled: false
replication.factor: -1
emit.heartbeats.interval.seconds: 5
""",
    )
    cfg = load_config(path)
    assert [f.name for f in cfg.enabled_flows()] == ["east->west"]
    flow = cfg.flow("east", "west")
    assert flow.topics == ("orders", "pay.*")
    assert flow.tasks_max == 4 and flow.sync_group_offsets_enabled
    assert flow.replication_factor == -1
    assert flow.emit_heartbeats_interval_seconds == 5
    assert cfg.clusters["west"].bootstrap_servers == "w1:9092"
    assert flow.client_config("source", "consumer") == {
        "bootstrap.servers": "e1:9092,e2:9092",
        "security.protocol": "SSL",
        "fetch.min.bytes": "1",
        "check.crcs": "false",
    }
    assert flow.topic_filter().should_replicate("payments")
    assert not flow.topic_filter().should_replicate("inventory")


def test_flat_yaml_and_json_match_properties(tmp_path: Path) -> None:
    flat = {**_BASE, "east->west.enabled": "true", "east->west.topics": "a, b", "tasks.max": "2"}
    props = "\n".join(f"{k}={v}" for k, v in flat.items())
    yaml_text = "\n".join(f"{k}: '{v}'" for k, v in flat.items())
    a = load_config(_write(tmp_path, "x.properties", props))
    b = load_config(_write(tmp_path, "x.yml", yaml_text))
    c = load_config(_write(tmp_path, "x.json", json.dumps(flat)))
    assert a == b == c
    assert a.flow("east", "west").topics == ("a", "b")
    assert a.flow("east", "west").tasks_max == 2


def test_flows_list_shorthand() -> None:
    cfg = MirrorMakerConfig.from_mapping(
        {"clusters": {"a": "a:1", "b": "b:1", "c": "c:1"}, "flows": ["a->b", "b->c"]}
    )
    assert sorted(f.name for f in cfg.enabled_flows()) == ["a->b", "b->c"]
    assert len(cfg.flows) == 6


# ----------------------------------------------------------------------------- defaults & precedence


def test_mm2_defaults() -> None:
    flow = _flat(**{"east->west.enabled": "true"}).flow("east", "west")
    assert flow.topics == (".*",)
    assert flow.topics_exclude == (r".*[\-\.]internal", r".*\.replica", "__.*")
    assert flow.groups == (".*",)
    assert flow.groups_exclude == ("console-consumer-.*", "connect-.*", "__.*")
    assert flow.tasks_max == 1
    assert flow.refresh_topics_interval_seconds == 600
    assert flow.refresh_groups_interval_seconds == 600
    assert flow.emit_checkpoints_interval_seconds == 60
    assert flow.emit_heartbeats_interval_seconds == 1
    assert flow.sync_topic_configs_enabled is True
    assert flow.sync_group_offsets_enabled is False
    assert flow.sync_group_offsets_interval_seconds == 60
    assert flow.replication_factor == 2
    assert flow.offset_syncs_topic_replication_factor == 3
    assert flow.checkpoints_topic_replication_factor == 3
    assert flow.heartbeats_topic_replication_factor == 3
    assert flow.offset_syncs_topic_location == "source"
    assert flow.offset_lag_max == 100
    assert flow.emit_offset_syncs_enabled is True
    assert flow.max_inflight_bytes_per_task == 64 * 1024 * 1024
    assert flow.offset_syncs_topic() == "mm2-offset-syncs.west.internal"
    assert flow.offset_syncs_cluster == "east"
    assert flow.checkpoints_topic() == "east.checkpoints.internal"
    assert not flow.config_property_filter().should_replicate("min.insync.replicas")


def test_flows_disabled_unless_enabled() -> None:
    cfg = _flat()
    assert cfg.enabled_flows() == []
    assert {f.name for f in cfg.heartbeat_flows()} == {"east->west", "west->east"}
    assert len(_flat(enabled="true").enabled_flows()) == 2  # top-level applies to all flows


def test_flow_key_overrides_top_level() -> None:
    cfg = _flat(**{"topics": "a.*", "east->west.topics": "b.*", "offset-syncs.topic.location": "target"})
    assert cfg.flow("east", "west").topics == ("b.*",)
    assert cfg.flow("west", "east").topics == ("a.*",)
    flow = cfg.flow("east", "west")
    assert flow.offset_syncs_cluster == "west"
    assert flow.offset_syncs_topic() == "mm2-offset-syncs.east.internal"


def test_client_override_precedence() -> None:
    cfg = _flat(
        **{
            "security.protocol": "SSL",  # top-level connection: fallback for every cluster
            "west.security.protocol": "SASL_SSL",
            "consumer.a": "top",
            "consumer.b": "top",
            "consumer.c": "top",
            "consumer.d": "top",
            "east->west.consumer.b": "flow",
            "east->west.consumer.c": "flow",
            "east->west.consumer.d": "flow",
            "east.consumer.c": "cluster",
            "east.consumer.d": "cluster",
            "east->west.source.consumer.d": "flow-side",
            "east->west.source.cluster.bootstrap.servers": "override:9092",
        }
    )
    flow = cfg.flow("east", "west")
    src = flow.client_config("source", "consumer")
    assert src["bootstrap.servers"] == "override:9092"
    assert src["security.protocol"] == "SSL"
    assert [src[k] for k in "abcd"] == ["top", "flow", "cluster", "flow-side"]
    tgt = flow.client_config("target", "consumer")
    assert tgt["bootstrap.servers"] == "w1:9092"
    assert tgt["security.protocol"] == "SASL_SSL"
    assert [tgt[k] for k in "abcd"] == ["top", "flow", "flow", "flow"]
    assert flow.client_config("source", "admin") == {
        "bootstrap.servers": "override:9092",
        "security.protocol": "SSL",
    }
    # consumer.poll.timeout.ms is an MM2 setting, not a client override
    assert _flat(**{"consumer.poll.timeout.ms": "5"}).flow("east", "west").consumer_poll_timeout_ms == 5


def test_identity_policy_gets_source_alias() -> None:
    flow = _flat(**{"replication.policy.class": "identity"}).flow("east", "west")
    policy = flow.replication_policy()
    assert isinstance(policy, IdentityReplicationPolicy)
    assert policy.topic_source("orders") == "east"
    assert policy.format_remote_topic("east", "orders") == "orders"


def test_custom_separator_flows_into_policy() -> None:
    flow = _flat(**{"replication.policy.separator": "_"}).flow("east", "west")
    assert flow.replication_policy().format_remote_topic("east", "t") == "east_t"
    assert flow.checkpoints_topic() == "east_checkpoints_internal"


# ----------------------------------------------------------------------------- errors


def _error(**extra: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        _flat(**extra)
    return info.value


def test_unknown_flow_key_suggests() -> None:
    err = _error(**{"east->west.topcs": "a"})
    assert str(err) == "unknown key 'east->west.topcs' (did you mean 'topics'?)"
    assert err.key == "east->west.topcs"


def test_unknown_top_level_and_cluster_keys() -> None:
    assert "did you mean 'tasks.max'" in str(_error(**{"task.max": "2"}))
    assert "did you mean 'east.bootstrap.servers'" in str(_error(**{"eats.bootstrap.servers": "x"}))
    assert "'east.replication.factor'" in str(_error(**{"east.replication.factor": "1"}))


def test_unknown_cluster_in_flow() -> None:
    err = _error(**{"north->west.enabled": "true"})
    assert "'north'" in str(err) and "east, west" in str(err)
    assert "TARGET" in str(_error(**{"east->south.enabled": "true"}))


def test_invalid_values_name_the_key() -> None:
    err = _error(**{"east->west.tasks.max": "0"})
    assert err.key == "east->west.tasks.max"
    assert "'east->west.tasks.max'" in str(err)
    err = _error(**{"offset.lag.max": "lots"})
    assert err.key == "offset.lag.max"
    err = _error(**{"east->west.offset-syncs.topic.location": "middle"})
    assert "offset-syncs.topic.location" in str(err)
    err = _error(**{"east->west.sync.group.offsets.enabled": "maybe"})
    assert err.key == "east->west.sync.group.offsets.enabled"


def test_bad_regex_names_key_and_pattern() -> None:
    err = _error(**{"east->west.topics": "ok, bad(regex"})
    assert err.key == "east->west.topics"
    assert "bad(regex" in str(err)


def test_unsupported_classes() -> None:
    assert "com.acme.Policy" in str(_error(**{"replication.policy.class": "com.acme.Policy"}))
    assert "filter" in str(_error(**{"topic.filter.class": "com.acme.TopicFilter"}))


def test_missing_bootstrap_and_clusters() -> None:
    with pytest.raises(ConfigError, match=re.escape("'west.bootstrap.servers'")):
        MirrorMakerConfig.from_flat({"clusters": "east, west", "east.bootstrap.servers": "e:1"})
    with pytest.raises(ConfigError, match="clusters"):
        MirrorMakerConfig.from_flat({"east.bootstrap.servers": "e:1"})


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unsupported"):
        load_config(_write(tmp_path, "mm2.toml", "x=1"))
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="cannot parse"):
        load_config(_write(tmp_path, "bad.json", "{"))
    dup = "clusters: {east: {bootstrap.servers: a}}\neast.bootstrap.servers: b\n"
    with pytest.raises(ConfigError, match=re.escape("duplicate key 'east.bootstrap.servers'")):
        load_config(_write(tmp_path, "dup.yaml", dup))


# ----------------------------------------------------------------------------- values


def test_config_pickles_and_with_settings() -> None:
    cfg = _flat(**{"east->west.enabled": "true"})
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    flow = cfg.flow("east", "west")
    changed = flow.with_settings({"topics": "x.*", "tasks.max": 3})
    assert isinstance(changed, FlowConfig)
    assert changed.topics == ("x.*",) and changed.tasks_max == 3
    assert flow.topics == (".*",)  # original untouched
    assert changed.source_cluster == flow.source_cluster
    with pytest.raises(ConfigError, match="did you mean 'topics'"):
        flow.with_settings({"topic": "x"})
    with pytest.raises(ConfigError, match=re.escape("'east->west.tasks.max'")):
        flow.with_settings({"tasks.max": -1})
