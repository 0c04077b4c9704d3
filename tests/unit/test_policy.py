from __future__ import annotations

import pickle

import pytest

from mm2py.config.policy import (
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    ReplicationPolicy,
    is_cycle,
    policy_from_config,
)


def test_default_naming() -> None:
    p = DefaultReplicationPolicy()
    assert p.format_remote_topic("east", "orders") == "east.orders"
    assert p.topic_source("east.orders") == "east"
    assert p.upstream_topic("east.orders") == "orders"
    assert p.topic_source("orders") is None
    assert p.upstream_topic("orders") is None
    # multi-hop
    assert p.topic_source("west.east.orders") == "west"
    assert p.upstream_topic("west.east.orders") == "east.orders"
    assert p.original_topic("west.east.orders") == "orders"
    assert p.original_topic("orders") == "orders"


def test_default_java_split_quirks() -> None:
    p = DefaultReplicationPolicy()
    assert p.topic_source("foo.") is None  # trailing empty parts are dropped
    assert p.topic_source("foo..") is None
    assert p.topic_source("a..b") == "a"
    assert p.upstream_topic("a..b") == ".b"
    assert p.topic_source(".foo") == ""  # leading empty part is kept
    assert p.topic_source("") is None


def test_default_custom_separator() -> None:
    p = DefaultReplicationPolicy("__")
    assert p.format_remote_topic("east", "orders.v1") == "east__orders.v1"
    assert p.topic_source("east__orders.v1") == "east"
    assert p.upstream_topic("east__orders.v1") == "orders.v1"
    assert p.topic_source("east.orders") is None
    assert p.offset_syncs_topic("west") == "mm2-offset-syncs__west__internal"
    assert p.checkpoints_topic("east") == "east__checkpoints__internal"
    assert p.is_checkpoints_topic("east__checkpoints__internal")
    assert p.is_mm2_internal_topic("mm2-offset-syncs__west__internal")
    legacy = DefaultReplicationPolicy("__", internal_topic_separator_enabled=False)
    assert legacy.offset_syncs_topic("west") == "mm2-offset-syncs.west.internal"
    assert legacy.checkpoints_topic("east") == "east.checkpoints.internal"


def test_empty_separator_rejected() -> None:
    with pytest.raises(ValueError):
        DefaultReplicationPolicy("")


def test_internal_topic_names() -> None:
    p = DefaultReplicationPolicy()
    assert p.heartbeats_topic() == "heartbeats"
    assert p.offset_syncs_topic("west") == "mm2-offset-syncs.west.internal"
    assert p.checkpoints_topic("east") == "east.checkpoints.internal"
    assert p.is_checkpoints_topic("east.checkpoints.internal")
    assert not p.is_checkpoints_topic("east.checkpoints")


@pytest.mark.parametrize(
    ("topic", "internal"),
    [
        ("__consumer_offsets", True),
        ("__transaction_state", True),
        (".hidden", True),
        ("connect-offsets-internal", True),
        ("mm2-offset-syncs.west.internal", True),
        ("east.checkpoints.internal", True),
        ("orders", False),
        ("heartbeats", False),
        ("east.heartbeats", False),
        ("internal", False),
    ],
)
def test_is_internal_topic(topic: str, internal: bool) -> None:
    assert DefaultReplicationPolicy().is_internal_topic(topic) is internal
    assert IdentityReplicationPolicy().is_internal_topic(topic) is internal


def test_heartbeats_topic_detection() -> None:
    p = DefaultReplicationPolicy()
    assert p.is_heartbeats_topic("heartbeats")
    assert p.is_heartbeats_topic("east.heartbeats")
    assert p.is_heartbeats_topic("west.east.heartbeats")
    assert not p.is_heartbeats_topic("east.heartbeats2")
    assert not p.is_heartbeats_topic("myheartbeats")


def test_identity_policy() -> None:
    p = IdentityReplicationPolicy()
    assert p.format_remote_topic("east", "orders") == "orders"
    assert p.topic_source("orders") is None
    assert p.upstream_topic("orders") == "orders"
    assert p.original_topic("east.orders") == "east.orders"
    # heartbeats defer to the default policy
    assert p.format_remote_topic("east", "heartbeats") == "east.heartbeats"
    assert p.topic_source("east.heartbeats") == "east"
    assert p.upstream_topic("east.heartbeats") == "heartbeats"
    assert p.is_heartbeats_topic("east.heartbeats")
    # MM2 quirk: anything *ending* in the heartbeats name is treated like one
    assert p.format_remote_topic("east", "myheartbeats") == "east.myheartbeats"
    with_alias = IdentityReplicationPolicy(source_cluster_alias="east")
    assert with_alias.topic_source("orders") == "east"


def test_is_cycle_default() -> None:
    p = DefaultReplicationPolicy()
    assert not is_cycle(p, "orders", "west")
    assert not is_cycle(p, "east.orders", "west")
    assert is_cycle(p, "west.orders", "west")
    assert is_cycle(p, "east.west.orders", "west")
    assert not is_cycle(p, "east.central.orders", "west")


def test_is_cycle_identity_terminates() -> None:
    p = IdentityReplicationPolicy(source_cluster_alias="east")
    assert not is_cycle(p, "orders", "west")
    assert is_cycle(p, "orders", "east")  # source alias equals target: refused, as in MM2
    assert is_cycle(IdentityReplicationPolicy(), "west.heartbeats", "west")
    assert not is_cycle(IdentityReplicationPolicy(), "east.heartbeats", "west")


class _LoopingPolicy(ReplicationPolicy):
    """A policy whose chain never ends; is_cycle and original_topic must still terminate."""

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return topic

    def topic_source(self, topic: str) -> str | None:
        return "x"

    def upstream_topic(self, topic: str) -> str | None:
        return topic + "!" if len(topic) < 5000 else "a"


def test_guard_against_non_terminating_policy() -> None:
    p = _LoopingPolicy()
    assert not is_cycle(p, "a", "west")
    assert isinstance(p.original_topic("a"), str)


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("org.apache.kafka.connect.mirror.DefaultReplicationPolicy", DefaultReplicationPolicy),
        ("org.apache.kafka.connect.mirror.IdentityReplicationPolicy", IdentityReplicationPolicy),
        ("default", DefaultReplicationPolicy),
        ("identity", IdentityReplicationPolicy),
        ("Identity", IdentityReplicationPolicy),
        ("IdentityReplicationPolicy", IdentityReplicationPolicy),
    ],
)
def test_policy_from_config(name: str, cls: type) -> None:
    p = policy_from_config(name, "-", source_cluster_alias="east")
    assert type(p) is cls
    assert p.format_remote_topic("east", "heartbeats") == "east-heartbeats"


def test_policy_from_config_unknown() -> None:
    with pytest.raises(ValueError, match=r"com\.example\.MyPolicy"):
        policy_from_config("com.example.MyPolicy", ".")


def test_policies_are_picklable_values() -> None:
    p = policy_from_config("identity", "_", source_cluster_alias="a")
    q = pickle.loads(pickle.dumps(p))
    assert q == p and hash(q) == hash(p)
    assert DefaultReplicationPolicy(".") != IdentityReplicationPolicy(".")
