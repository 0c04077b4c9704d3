from __future__ import annotations

import pickle

import pytest

from mm2py.config.errors import ConfigError
from mm2py.config.filters import (
    ConfigPropertyFilter,
    GroupFilter,
    PatternList,
    TopicFilter,
    split_list,
)


def test_split_list() -> None:
    assert split_list(" a , b,c ") == ("a", "b", "c")
    assert split_list("") == ()
    assert split_list("   ") == ()
    assert split_list(["x.*", " y "]) == ("x.*", "y")
    assert split_list("a,") == ("a",)


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("orders", True),
        ("east.orders", True),
        ("heartbeats", True),
        ("connect-configs-internal", False),
        ("mm2-offset-syncs.west.internal", False),
        ("orders.replica", False),
        ("__consumer_offsets", False),
        ("internal", True),
        ("my_internal", True),  # '_' is not in [\-\.]
    ],
)
def test_topic_filter_defaults(topic: str, expected: bool) -> None:
    assert TopicFilter.from_config().should_replicate(topic) is expected


def test_topic_filter_full_match_and_lists() -> None:
    f = TopicFilter.from_config("orders, pay.*", "payments-test")
    assert f.should_replicate("orders")
    assert not f.should_replicate("orders2")  # full match, not search
    assert not f.should_replicate("xorders")
    assert f.should_replicate("payments")
    assert not f.should_replicate("payments-test")  # exclude wins


def test_empty_include_matches_nothing() -> None:
    f = TopicFilter.from_config("", "")
    assert not f.should_replicate("orders")
    assert not f.should_replicate("")


def test_empty_exclude_excludes_nothing() -> None:
    assert TopicFilter.from_config(".*", "").should_replicate("__consumer_offsets")


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        ("payments-app", True),
        ("console-consumer-1234", False),
        ("connect-mm2", False),
        ("__internal", False),
        ("my-connect-group", True),
    ],
)
def test_group_filter_defaults(group: str, expected: bool) -> None:
    assert GroupFilter.from_config().should_replicate(group) is expected


def test_config_property_filter_defaults() -> None:
    f = ConfigPropertyFilter.from_config()
    for prop in (
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "min.insync.replicas",
    ):
        assert not f.should_replicate(prop), prop
    assert f.should_replicate("retention.ms")
    assert f.should_replicate("cleanup.policy")
    # dots are escaped in MM2's defaults: a look-alike name must not match
    assert f.should_replicate("min_insync_replicas")
    assert not f.should_replicate_source_default("retention.ms")
    assert ConfigPropertyFilter.from_config(use_defaults_from="source").should_replicate_source_default(
        "retention.ms"
    )
    assert f.filter(["retention.ms", "min.insync.replicas"]) == ["retention.ms"]


def test_bad_regex_names_pattern_and_key() -> None:
    with pytest.raises(ConfigError) as info:
        TopicFilter.from_config("orders, pay(ments")
    assert "pay(ments" in str(info.value)
    assert "topics" in str(info.value)
    assert info.value.key == "topics"
    with pytest.raises(ConfigError, match=r"groups\.exclude"):
        GroupFilter.from_config(".*", "[abc")


def test_bad_use_defaults_from() -> None:
    with pytest.raises(ConfigError, match=r"use\.defaults\.from"):
        ConfigPropertyFilter.from_config(use_defaults_from="both")  # type: ignore[arg-type]


def test_filters_are_immutable_values_swapped_at_runtime() -> None:
    f = TopicFilter.from_config("orders")
    g = f.with_patterns(topics="orders, payments")
    assert not f.should_replicate("payments")
    assert g.should_replicate("payments")
    assert g.exclude == f.exclude
    with pytest.raises(AttributeError):
        f.include = PatternList.parse("x")  # type: ignore[misc]
    h = g.with_patterns(topics_exclude="pay.*")
    assert not h.should_replicate("payments") and h.should_replicate("orders")
    assert h.to_config() == {"topics": "orders, payments", "topics.exclude": "pay.*"}
    gf = GroupFilter.from_config().with_patterns(groups="app-.*")
    assert gf.should_replicate("app-1") and not gf.should_replicate("other")


def test_filters_pickle_and_compare() -> None:
    f = TopicFilter.from_config("a.*", "ab")
    g = pickle.loads(pickle.dumps(f))
    assert g == f
    assert g.should_replicate("ac") and not g.should_replicate("ab")
    assert hash(g) == hash(f)
    assert TopicFilter.from_config("a.*") != TopicFilter.from_config("b.*")
