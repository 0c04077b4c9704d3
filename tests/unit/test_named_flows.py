"""Several flows per cluster pair, each keyed by its own name (runners faked: no broker needed):
names, the overlap rule, which flow a pair-shaped address means, positions keyed per flow, and the
state file (named flows kept across restarts; a file written before flows had names loads as is)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from mm2py.config.errors import ConfigError
from mm2py.config.models import MirrorMakerConfig, check_flow_name
from mm2py.config.patch import FlowPatch
from mm2py.engine.flow_overlap import first_overlap, older_claim
from mm2py.protocol.connect_offsets import Position, encode_key, encode_value, fold
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.steering import FlowConflictError, FlowExistsError, FlowNotFoundError
from tests.support import fake_flows
from tests.support.fake_flows import BASE, FakeWorker


def _set(values: dict[str, Any]) -> FlowPatch:
    """A change setting ``values`` (MM2 names)."""
    return FlowPatch(values=values)


@pytest.fixture(autouse=True)
def source_topics() -> Any:
    fake_flows.SOURCE_TOPICS.clear()
    fake_flows.SOURCE_TOPICS.update({"orders", "payments", "audit", "heartbeats"})
    yield fake_flows.SOURCE_TOPICS
    fake_flows.SOURCE_TOPICS.clear()


@pytest.mark.parametrize("name", ["mirror-east-west-fast", "east->west", "a b", "orders.v2_1", "é"])
def test_connect_style_names_and_the_pairs_own_name_are_flow_names(name: str) -> None:
    assert check_flow_name(name, "east", "west") == name


@pytest.mark.parametrize("name", ["", "a/b", "a\\b", " lead", "trail ", "west->east", "x->y", "tab\t",
                                  "x" * 200])
def test_names_that_are_no_single_path_segment_or_another_pairs_are_refused(name: str) -> None:
    with pytest.raises(ConfigError):
        check_flow_name(name, "east", "west")


def test_the_first_overlap_names_the_topic_and_the_other_flow_and_heartbeats_never_count() -> None:
    def starts(prefix: str) -> Any:
        return lambda t: t.startswith(prefix)

    others = [("slow", starts("o")), ("audit", starts("a"))]
    topics = ["heartbeats", "payments", "orders", "audit"]
    assert first_overlap(topics, starts("p"), others, lambda t: t == "heartbeats") is None
    assert first_overlap(topics, lambda t: True, others, lambda t: t == "heartbeats") == ("audit", "audit")
    assert first_overlap(topics, starts("or"), others, lambda t: t == "heartbeats") == ("orders", "slow")
    assert older_claim("orders", others) == "slow" and older_claim("zz", others) is None


def test_positions_are_keyed_by_the_flows_connector_name_in_one_progress_topic() -> None:
    tp = TopicPartition("orders", 0)
    config = MirrorMakerConfig.from_flat(BASE)
    unnamed = config.flow("east", "west")
    fast = unnamed.named("fast", {"topics": "orders"})
    assert (unnamed.name, unnamed.connector_name) == ("east->west", "MirrorSourceConnector")
    assert (fast.name, fast.pair, fast.connector_name, fast.label) == ("fast", "east->west", "fast", "fast")
    assert unnamed.named("east->west", {}).label is None  # the pair's own name: the unnamed flow
    with pytest.raises(ConfigError) as err:
        unnamed.named("fast", {"tasks.max": "many"})
    assert err.value.key == "fast.tasks.max"
    assert json.loads(encode_key("east", tp, "fast"))[0] == "fast"
    mine: dict[TopicPartition, Position] = {}
    theirs: dict[TopicPartition, Position] = {}
    everyone: dict[TopicPartition, Position] = {}
    for connector, last in (("fast", 9), ("MirrorSourceConnector", 4)):
        for positions, who in ((mine, "fast"), (theirs, "MirrorSourceConnector"), (everyone, None)):
            fold(positions, "east", encode_key("east", tp, connector), encode_value(last, 3), who)
    assert mine == {tp: Position(10, 3)} and theirs == {tp: Position(5, 3)} and everyone == theirs


def test_flows_of_one_pair_with_disjoint_topics_run_side_by_side_and_an_overlap_is_refused() -> None:
    async def run() -> None:
        worker = FakeWorker()
        await worker.start()
        fast = await worker.add_flow("east", "west", _set({"topics": "orders", "tasks.max": 3}), name="fast")
        slow = await worker.add_flow("east", "west", _set({"topics": "payments"}), name="slow")
        assert (fast.flow.tasks_max, slow.flow.tasks_max) == (3, 2) and fast.calls == ["start"]
        assert list(worker.flows) == ["fast", "slow"]
        with pytest.raises(FlowConflictError, match=r"'orders'.*flow 'fast'"):
            await worker.add_flow("east", "west", _set({"topics": "orders|audit"}), name="third")
        with pytest.raises(FlowConflictError, match=r"'orders'.*flow 'fast'"):
            await worker.add_flow("east", "west", _set({}), name="all")  # the default filter: every topic
        assert "third" not in worker.flows and "all" not in worker.named
        with pytest.raises(FlowExistsError):
            await worker.add_flow("east", "west", _set({"topics": "audit"}), name="fast")
        # a filter change is checked as a creation is; refused, nothing changed
        with pytest.raises(FlowConflictError, match=r"'payments'.*flow 'slow'"):
            await worker.update_flow("fast", _set({"topics": "orders,payments"}))
        assert worker.flows["fast"] is fast and fast.flow.topics == ("orders",)
        assert worker.named.settings("fast") == {"topics": "orders", "tasks.max": "3"}
        await worker.update_flow("fast", _set({"topics": "orders,audit"}))  # in place, disjoint still
        assert fast.controller.topic_filter.should_replicate("audit") and "refresh" in fast.calls
        # heartbeats go to the older flow only; a topic appearing later that both select too
        assert fast.controller.should_replicate("heartbeats")
        assert not slow.controller.should_replicate("heartbeats")
        await worker.update_flow("slow", _set({"topics": "payments,late.*"}))
        await worker.update_flow("fast", _set({"topics": "orders,audit,late.*"}))  # no late topic yet
        assert fast.controller.should_replicate("late.x") and not slow.controller.should_replicate("late.x")
        assert slow.controller.claimed_by("late.x") == "fast"

    asyncio.run(run())


def test_a_pair_shaped_address_means_the_pairs_unnamed_or_only_flow() -> None:
    async def run() -> None:
        worker = FakeWorker()
        await worker.start()
        with pytest.raises(FlowNotFoundError):
            worker.flow("east->west")
        fast = await worker.add_flow("east", "west", _set({"topics": "orders"}), name="fast")
        assert worker.flow("east->west") is fast and worker.resolve("east", "west") == "fast"
        await worker.halt_flow("east->west", "STOPPED")  # the pair's only flow, by its name
        assert worker.halted == {"fast": "STOPPED"}
        await worker.add_flow("east", "west", _set({"topics": "payments"}), name="slow")
        with pytest.raises(FlowConflictError, match=r"2 flows \(fast, slow\)"):
            worker.flow("east->west")
        unnamed = await worker.add_flow("east", "west", _set({"topics": "audit"}))
        assert unnamed.flow.name == "east->west" and worker.flow("east->west") is unnamed
        assert unnamed.flow.label is None and worker.named.age(unnamed.flow) == 0

    asyncio.run(run())


def test_named_flows_are_kept_in_the_state_file_and_removed_from_it(tmp_path: Path) -> None:
    state = tmp_path / "state.json"

    async def first() -> None:
        worker = FakeWorker(state)
        await worker.start()
        await worker.add_flow("east", "west", _set({"topics": "orders", "tasks.max": 3}), name="zz-first")
        await worker.add_flow("east", "west", _set({"topics": "payments"}), name="aa-second",
                              halted="STOPPED")
        await worker.add_flow("east", "west", _set({"topics": "audit"}), name="gone")
        await worker.remove_flow("gone")

    asyncio.run(first())
    doc = json.loads(state.read_text())
    assert set(doc["sections"]["flows"]) == {"zz-first", "aa-second"} and doc["keys"] == {}

    async def second() -> None:
        worker = FakeWorker(state)
        assert list(worker.flows) == ["zz-first", "aa-second"]  # oldest first, not by name
        await worker.start()
        first, second = worker.flows["zz-first"], worker.flows["aa-second"]
        assert (first.flow.tasks_max, first.flow.topics, first.state) == (3, ("orders",), "RUNNING")
        assert (second.flow.topics, second.state, second.calls) == (("payments",), "STOPPED", [])
        assert second.controller.claimed_by("orders") == "zz-first"

    asyncio.run(second())


def test_a_state_file_from_before_named_flows_loads_unchanged(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    old = {"version": 1, "keys": {"east->west.enabled": "true", "east->west.topics": "orders"},
           "sections": {"states": {"east->west": "PAUSED"},
                        "connectors": {"m": {"connector.class": "MirrorSourceConnector",
                                             "source.cluster.alias": "east",
                                             "target.cluster.alias": "west"}}}}
    state.write_text(json.dumps(old))
    worker = FakeWorker(state)
    assert list(worker.flows) == ["east->west"] and worker.named.names() == []
    flow = worker.flows["east->west"].flow
    assert (flow.topics, flow.label, flow.connector_name) == (("orders",), None, "MirrorSourceConnector")
    assert "m" not in worker.named  # the connector keeps driving the pair's unnamed flow
    state.write_text(json.dumps({**old, "sections": {"flows": {"x": {"source": "east"}}}}))
    with pytest.raises(ConfigError, match="flow 'x'"):
        FakeWorker(state)


def test_source_connectors_are_named_flows_and_the_pairs_checkpoint_connector_applies_to_each() -> None:
    from mm2py.rest_api.connect.errors import ConnectError
    from mm2py.rest_api.connect.facade import Facade

    def config(cls: str, **extra: str) -> dict[str, str]:
        return {"connector.class": cls, "source.cluster.alias": "east", "target.cluster.alias": "west",
                **extra}

    async def run() -> None:
        worker = FakeWorker()
        await worker.start()
        facade = Facade(worker)
        fast = config("MirrorSourceConnector", topics="orders", **{"tasks.max": "3"})
        assert await facade.put("fast", fast, create_only=True)
        await facade.put("slow", config("MirrorSourceConnector", topics="payments"), create_only=True)
        assert facade.lookup("fast")[:2] == ("source", "fast") and sorted(facade.names()) == ["fast", "slow"]
        assert not worker.flows["fast"].flow.emit_checkpoints_enabled  # no checkpoint connector yet
        with pytest.raises(FlowConflictError, match="'orders'"):
            await facade.put("all", config("MirrorSourceConnector"), create_only=True)
        await facade.put("cp", config("MirrorCheckpointConnector", **{"sync.group.offsets.enabled": "true"}),
                         create_only=True)
        assert all(worker.flows[n].flow.sync_group_offsets_enabled for n in ("fast", "slow"))
        with pytest.raises(ConnectError, match=r"has a .*MirrorCheckpointConnector already"):
            await facade.put("cp2", config("MirrorCheckpointConnector"), create_only=True)
        await facade.put("late", config("MirrorSourceConnector", topics="audit"), create_only=True)
        assert worker.flows["late"].flow.sync_group_offsets_enabled  # the pair's connector applies
        await facade.delete("cp")
        assert not any(r.flow.emit_checkpoints_enabled for r in worker.flows.values())
        await facade.delete("fast")
        assert list(worker.flows) == ["slow", "late"] and "fast" not in worker.named

    asyncio.run(run())
