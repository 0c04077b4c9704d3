"""mm2py.config.flat: flat ``mm2.properties`` keys sorted into their scopes (top level, cluster, flow,
client kind, side), Connect worker keys accepted and ignored, anything else an error naming the key."""

from __future__ import annotations

import pytest

from mm2py.config.errors import ConfigError
from mm2py.config.flat import classify, flow_client_key, is_connection_key, to_client_value

SETTINGS = frozenset({"topics", "enabled", "tasks.max"})


def test_each_key_lands_in_its_scope() -> None:
    flat = classify({
        "clusters": "east, west, east",  # listed twice: once
        "topics": ".*",
        "bootstrap.servers": "fallback:9092",
        "consumer.fetch.max.bytes": 1000,
        "east.bootstrap.servers": "e:9092",
        "east.sasl.mechanism": "PLAIN",
        "east.producer.linger.ms": 5,
        "east->west.topics": "orders",
        "east->west.enabled": True,
        "east->west.consumer.max.poll.records": 10,
        "east->west.source.admin.request.timeout.ms": 7,
        "east->west.target.cluster.security.protocol": "SSL",
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "west.offset.storage.topic": "x",
    }, SETTINGS)
    assert flat.clusters == ["east", "west"]
    assert flat.top_settings == {"topics": (".*", "topics")}
    assert flat.top_connection == {"bootstrap.servers": "fallback:9092"}
    assert flat.top_clients == {"consumer": {"fetch.max.bytes": "1000"}}
    assert flat.cluster_connection == {"east": {"bootstrap.servers": "e:9092", "sasl.mechanism": "PLAIN"}}
    assert flat.cluster_clients == {"east": {"producer": {"linger.ms": "5"}}}
    # a flow setting keeps the key it came from (errors name it), its value untouched
    assert flat.flow_settings == {("east", "west"): {"topics": ("orders", "east->west.topics"),
                                                     "enabled": (True, "east->west.enabled")}}
    assert flat.flow_clients == {("east", "west"): {
        "consumer": {"max.poll.records": "10"},
        "source.admin": {"request.timeout.ms": "7"},
        "target.cluster": {"security.protocol": "SSL"},
    }}
    assert sorted(flat.ignored) == ["key.converter", "west.offset.storage.topic"]


def test_the_longest_alias_wins_when_one_is_a_prefix_of_another() -> None:
    flat = classify({"clusters": "a, a.b, c", "a.b.bootstrap.servers": "ab:1", "a.bootstrap.servers": "a:1",
                     "c->a.b.topics": "x"}, SETTINGS)
    assert flat.cluster_connection == {"a.b": {"bootstrap.servers": "ab:1"},
                                       "a": {"bootstrap.servers": "a:1"}}
    assert flat.flow_settings == {("c", "a.b"): {"topics": ("x", "c->a.b.topics")}}


@pytest.mark.parametrize(("raw", "key", "words"), [
    ({}, "clusters", "missing required key 'clusters'"),
    ({"clusters": 3}, "clusters", "comma-separated list"),
    ({"clusters": " , "}, "clusters", "at least one cluster"),
    ({"clusters": "a->b"}, "clusters", "invalid cluster alias 'a->b'"),
    ({"clusters": "a,b", "topcs": "x"}, "topcs", "did you mean 'topics'?"),
    ({"clusters": "a,b", "a.bootstrap.server": "x"}, "a.bootstrap.server",
     "did you mean 'bootstrap.servers'?"),
    ({"clusters": "a,b", "c->b.topics": "x"}, "c->b.topics", "unknown cluster alias 'c'"),
    ({"clusters": "a,b", "a->c.topics": "x"}, "a->c.topics", "TARGET one of: a, b"),
    ({"clusters": "a,b", "a->a.topics": "x"}, "a->a.topics", "source and target must differ"),
    ({"clusters": "a,b", "a->b.source.cluster.linger.ms": "1"}, "a->b.source.cluster.linger.ms",
     "only connection settings"),
    ({"clusters": "a,b", "a->b.tasks.mx": "1"}, "a->b.tasks.mx", "did you mean 'tasks.max'?"),
    ({"clusters": "a,b", "consumer.x": {"nested": 1}}, "consumer.x", "expected a scalar, got dict"),
])
def test_a_key_it_cannot_place_is_an_error_naming_it(raw: dict[str, object], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        classify(raw, SETTINGS)
    assert err.value.key == key
    assert words in str(err.value)


def test_flow_client_key_names_the_role_and_property_or_none_for_an_ignored_key() -> None:
    assert flow_client_key("a->b.producer.acks", "producer.acks", SETTINGS) == ("producer", "acks")
    assert flow_client_key("k", "target.producer.acks", SETTINGS) == ("target.producer", "acks")
    assert flow_client_key("k", "source.cluster.ssl.truststore.location", SETTINGS) == (
        "source.cluster", "ssl.truststore.location")
    assert flow_client_key("k", "errors.tolerance", SETTINGS) is None
    with pytest.raises(ConfigError, match=r"unknown key 'a->b\.consumer\.'"):  # a client kind, no property
        flow_client_key("a->b.consumer.", "consumer.", SETTINGS)
    with pytest.raises(ConfigError, match=r"unknown key 'a->b\.nope'"):
        flow_client_key("a->b.nope", "nope", SETTINGS)


def test_client_values_are_strings_as_in_java() -> None:
    assert to_client_value("k", True) == "true" and to_client_value("k", False) == "false"
    assert to_client_value("k", 5) == "5" and to_client_value("k", 0.5) == "0.5"
    assert to_client_value("k", "  x ") == "x"
    assert to_client_value("k", ["a", 1, True]) == "a,1,true"
    with pytest.raises(ConfigError, match="invalid value for 'k'"):
        to_client_value("k", None)


def test_connection_keys_are_those_mm2_passes_to_every_client() -> None:
    assert all(is_connection_key(k) for k in ("bootstrap.servers", "security.protocol", "ssl.keystore.type",
                                              "sasl.jaas.config"))
    assert not any(is_connection_key(k) for k in ("client.id", "linger.ms", "sslx", "bootstrap.server"))
