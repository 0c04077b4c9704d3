"""The controller's refresh, step by step (select, create, grow, sync configs, assign), over admin
clients that keep topics in memory and record what they were asked (no broker: the steps are rules
about which calls to make; tests/integration/test_mirror_flow.py runs them on real brokers)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from mm2py.config.filters import ConfigPropertyFilter, TopicFilter
from mm2py.config.policy import DefaultReplicationPolicy
from mm2py.engine.controller import TARGET_FIXED_CONFIGS, Controller
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import TopicInfo, TopicSpec


class Topics:
    """A cluster's topics (name -> partitions, configs set on the topic) and the calls made."""

    def __init__(self, topics: Mapping[str, int], configs: Mapping[str, dict[str, str]] | None = None):
        self.partitions = dict(topics)
        self.configs = {t: dict((configs or {}).get(t, {})) for t in topics}
        self.calls: list[tuple[str, Any]] = []
        self.refuse_growing: dict[str, str] = {}  # topic -> the cluster's refusal of CreatePartitions

    def list_topics(self) -> dict[str, TopicInfo]:
        return {t: TopicInfo(t, n, 1) for t, n in self.partitions.items()}

    def topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        asked = sorted(topics)
        self.calls.append(("describe", asked))
        return {t: dict(self.configs[t]) for t in asked}

    def create_topics(self, specs: Iterable[TopicSpec]) -> list[str]:
        new = [s for s in specs if s.name not in self.partitions]
        self.calls.append(("create", [s.name for s in new]))
        for s in new:
            self.partitions[s.name] = s.partitions
            self.configs[s.name] = dict(s.config)
        return [s.name for s in new]

    def add_partitions(self, counts: Mapping[str, int]) -> dict[str, str]:
        self.calls.append(("grow", dict(counts)))
        self.partitions.update({t: n for t, n in counts.items() if t not in self.refuse_growing})
        return {t: why for t, why in self.refuse_growing.items() if t in counts}

    def alter_topic_configs(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        self.calls.append(("alter", {t: dict(c) for t, c in configs.items()}))
        for t, c in configs.items():
            self.configs[t].update(c)


def _controller(source: Topics, target: Topics, *, sync: bool = True, tasks: int = 2,
                topics: str = ".*") -> Controller:
    admin: Any = (source, target)
    return Controller("east", "west", admin[0], admin[1], topic_filter=TopicFilter.from_config(topics),
                      policy=DefaultReplicationPolicy(), tasks_max=tasks, sync_topic_configs=sync,
                      config_filter=ConfigPropertyFilter.from_config())


def test_select_keeps_what_the_filter_allows_and_names_cycles() -> None:
    source = Topics({"orders": 1, "west.orders": 1, "__consumer_offsets": 1, "skip": 1})
    ctl = _controller(source, Topics({}), topics="orders, west.orders, __consumer_offsets")
    selected, cycles = ctl.select_topics(source.list_topics())
    assert selected == {"orders": "east.orders"}  # internal topics and the other side's never
    assert cycles == ["west.orders"]


def test_create_gives_a_new_remote_topic_the_sources_filtered_configs_even_with_sync_off() -> None:
    """Issue 46: with sync.topic.configs.enabled=false a source topic kept forever (retention.ms=-1)
    or compacted became a remote topic with the target's defaults, which then deleted backfilled
    history. MM2 copies the configs when it creates a remote topic, whatever the sync says."""
    source = Topics({"history": 2, "table": 1}, {
        "history": {"retention.ms": "-1", "message.timestamp.type": "LogAppendTime"},
        "table": {"cleanup.policy": "compact"}})
    target = Topics({"east.table": 1}, {"east.table": {"cleanup.policy": "delete"}})
    plan = _controller(source, target, sync=False).refresh()
    assert plan.created == ["east.history"]
    # the filter leaves message.timestamp.type out (MM2's default exclude list)
    assert target.configs["east.history"] == {"retention.ms": "-1", **TARGET_FIXED_CONFIGS}
    assert target.partitions["east.history"] == 2
    assert target.configs["east.table"] == {"cleanup.policy": "delete"}  # an existing one is left as it is
    assert ("describe", ["history"]) in source.calls  # only the topic being created is described
    assert not [c for c in target.calls if c[0] == "alter"]
    # the next round creates nothing and describes nothing
    source.calls.clear()
    _controller(source, target, sync=False).refresh()
    assert not [c for c in source.calls if c[0] == "describe"]


def test_grow_adds_partitions_the_source_gained_and_never_removes_any() -> None:
    source = Topics({"a": 4, "b": 1})
    target = Topics({"east.a": 2, "east.b": 3})
    ctl = _controller(source, target)
    grown, short = ctl.grow_topics(source.list_topics(), target.list_topics(), {"a": "east.a", "b": "east.b"})
    assert short == {}
    assert grown == {"east.a": 4} and target.partitions == {"east.a": 4, "east.b": 3}


def test_sync_sets_only_what_changed_since_this_controller_last_set_it() -> None:
    source = Topics({"a": 1}, {"a": {"retention.ms": "1000"}})
    target = Topics({})
    ctl = _controller(source, target)
    ctl.refresh()  # created with retention.ms=1000
    assert [c for c in target.calls if c[0] == "alter"] == [("alter", {})]
    source.configs["a"]["retention.ms"] = "2000"
    ctl.refresh()
    assert target.calls[-1] == ("alter", {"east.a": {"retention.ms": "2000"}})
    assert target.configs["east.a"]["retention.ms"] == "2000"
    ctl.refresh()
    assert target.calls[-1] == ("alter", {})


def test_assign_spreads_every_partition_over_the_tasks_and_sticks() -> None:
    source = Topics({"a": 3, "b": 2})
    ctl = _controller(source, Topics({}), tasks=2)
    partitions, assignment = ctl.assign_partitions(source.list_topics(), {"a": "east.a", "b": "east.b"})
    assert sorted(partitions) == sorted(TopicPartition(t, p) for t, n in (("a", 3), ("b", 2))
                                        for p in range(n))
    assert sorted(tp for tps in assignment.values() for tp in tps) == sorted(partitions)
    assert sorted(len(v) for v in assignment.values()) == [2, 3]
    source.partitions["c"] = 1
    _, again = ctl.assign_partitions(source.list_topics(), {"a": "east.a", "b": "east.b", "c": "east.c"})
    for task, tps in assignment.items():
        assert set(tps) <= set(again[task])  # a partition stays with its task


def test_refresh_runs_the_steps_in_mm2s_order_and_reports_them() -> None:
    source = Topics({"a": 2, "b": 1}, {"a": {"retention.ms": "5"}})
    target = Topics({"east.b": 1})
    source.partitions["b"] = 2
    ctl = _controller(source, target)
    plan = ctl.refresh()
    assert [c[0] for c in target.calls] == ["create", "grow", "alter"]
    assert plan.created == ["east.a"] and plan.grown == {"east.b": 2}
    assert plan.topics == {"a": "east.a", "b": "east.b"} and len(plan.partitions) == 4
    assert ctl.refreshes == 1 and plan.task_count() == 2


def test_no_module_sets_a_controllers_claims_from_outside() -> None:
    """A controller's ``claimed_by`` is given to it when it is made (the runner passes the
    worker's rule down), never assigned onto it afterwards: the state has one owner."""
    import ast

    from tests.support.rooms import product_modules

    patched = []
    for name, path in product_modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Attribute) and target.attr == "claimed_by" and not (
                            name == "mm2py.engine.controller" and isinstance(target.value, ast.Name)
                            and target.value.id == "self"):
                        patched.append(f"{name}:{node.lineno}")
    assert not patched, f"claimed_by set from outside its controller: {patched}"


def test_a_remote_topic_the_target_refuses_to_grow_is_named_once_with_its_missing_partitions(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 46 item 5: a remote topic created beforehand with fewer partitions, and the mirror may
    not add any: the refresh goes on (other topics grow), the plan and the log name the remote
    topic, its missing partitions and why, the log once per reason; every source partition stays
    assigned (nothing goes to another partition: the tasks name the missing ones as refused)."""
    source = Topics({"a": 4, "b": 2})
    target = Topics({"east.a": 2, "east.b": 1})
    target.refuse_growing["east.a"] = "TOPIC_AUTHORIZATION_FAILED: not authorized"
    ctl = _controller(source, target)
    with caplog.at_level(logging.WARNING, logger="mm2py.engine.controller"):
        plan = ctl.refresh()
        ctl.refresh()
    assert plan.grown == {"east.b": 2} and target.partitions == {"east.a": 2, "east.b": 2}
    assert plan.short == {"east.a": (2, 4, "TOPIC_AUTHORIZATION_FAILED: not authorized")}
    [line] = [r.getMessage() for r in caplog.records if "not mirrored until it is grown" in r.getMessage()]
    assert "east.a has 2 partitions, its source 4: partitions 2..3" in line and "AUTHORIZATION" in line
    assert sorted(plan.partitions) == [TopicPartition("a", p) for p in range(4)] + [
        TopicPartition("b", p) for p in range(2)]
