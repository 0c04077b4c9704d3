"""``<alias>.admin.*`` overrides reach confluent-kafka's admin client (and only it)."""

from __future__ import annotations

import logging

import pytest

from mm2py.config.errors import ConfigError
from mm2py.config.models import MirrorMakerConfig
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.rdkafka.admin_settings import admin_settings


def flow(**extra: str) -> object:
    config = MirrorMakerConfig.from_flat({
        "clusters": "east, west", "east.bootstrap.servers": "127.0.0.1:1", "west.bootstrap.servers": "w:9092",
        "east->west.enabled": "true", **extra,
    })
    return config.enabled_flows()[0]


def test_admin_overrides_become_librdkafka_settings_of_the_admin_client_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    f = flow(**{"east.admin.client.id": "mirror-admin", "east.admin.request.timeout.ms": "5000",
                "east.admin.metadata.max.age.ms": "30000", "east.admin.default.api.timeout.ms": "7000",
                "east.admin.some.java.only.key": "x", "east.producer.client.id": "not-for-admin"})
    with caplog.at_level(logging.WARNING, "mm2py.rdkafka.admin_settings"):
        tuned = admin_settings(f, "source")  # type: ignore[arg-type]
    assert tuned.librdkafka == {"client.id": "mirror-admin", "socket.timeout.ms": "5000",
                                "metadata.max.age.ms": "30000"}
    assert tuned.timeout == 7.0
    assert tuned.ignored == ("east.admin.some.java.only.key",)
    assert "east.admin.some.java.only.key" in caplog.text
    admin = ClusterAdmin.for_cluster(f, "source")  # type: ignore[arg-type]
    assert admin.admin_settings == tuned.librdkafka and admin.timeout == 7.0
    assert "client.id" not in admin.client_config()  # producers and consumers do not get them
    assert admin_settings(f, "target").librdkafka == {}  # another cluster  # type: ignore[arg-type]


def test_a_flow_level_admin_override_wins_and_bad_values_name_their_key() -> None:
    f = flow(**{"east.admin.retry.backoff.ms": "100", "east->west.source.admin.retry.backoff.ms": "250"})
    assert admin_settings(f, "source").librdkafka == {"retry.backoff.ms": "250"}  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as err:
        admin_settings(flow(**{"east.admin.request.timeout.ms": "soon"}), "source")  # type: ignore[arg-type]
    assert err.value.key == "east.admin.request.timeout.ms"


def test_topic_creation_is_split_into_calls_a_kraft_controller_accepts() -> None:
    """A controller refuses more than 10,000 metadata records in one call: 100 topics of 100
    partitions (what a 10,000-partition mirror creates at its first plan) go in three calls."""
    from mm2py.rdkafka.admin_types import CONTROLLER_RECORDS_PER_CALL, TopicSpec, in_calls

    topics = [TopicSpec(f"t{i}", 100, 1, {"retention.ms": "1"}) for i in range(100)]
    calls = in_calls(topics, lambda t: 1 + t.partitions + len(t.config))
    assert [t for c in calls for t in c] == topics  # all of them, in order
    assert all(sum(102 for _ in c) <= CONTROLLER_RECORDS_PER_CALL for c in calls)
    assert len(calls) == 3
    assert in_calls([TopicSpec("huge", 20_000)], lambda t: t.partitions) == [[TopicSpec("huge", 20_000)]]
    assert in_calls([], lambda t: 1) == []
