"""Runtime changes as MM2 keys layered over the configuration file (no broker needed)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from mm2py.config.errors import ConfigError
from mm2py.config.models import MirrorMakerConfig
from mm2py.runtime.state_file import StateFile, StateFileLockError
from mm2py.runtime.steering import ClusterConflictError, cluster_keys, flow_keys, layered

BASE = {"clusters": "east, west", "east.bootstrap.servers": "e:1", "west.bootstrap.servers": "w:1",
        "replication.factor": "1"}


def test_flow_settings_become_prefixed_mm2_keys() -> None:
    keys = flow_keys("east->west", {"topics": ["a.*", "b"], "tasks.max": 3, "enabled": True})
    assert keys == {"east->west.topics": "a.*,b", "east->west.tasks.max": "3", "east->west.enabled": "true"}
    config = layered(BASE, keys)
    flow = config.flow("east", "west")
    assert (flow.enabled, flow.topics, flow.tasks_max, flow.replication_factor) == (True, ("a.*", "b"), 3, 1)
    assert not config.flow("west", "east").enabled


def test_a_misspelt_setting_is_named_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as err:
        layered(BASE, flow_keys("east->west", {"topcs": "a"}))
    assert "east->west.topcs" in str(err.value) and "did you mean 'topics'" in str(err.value)


def test_an_invalid_value_is_named() -> None:
    with pytest.raises(ConfigError) as err:
        layered(BASE, flow_keys("east->west", {"tasks.max": "many"}))
    assert err.value.key == "east->west.tasks.max"
    with pytest.raises(ConfigError) as err:
        layered(BASE, flow_keys("east->west", {"topics": "orders(["}))
    assert "east->west.topics" in str(err.value)


@pytest.mark.parametrize("bad", ["", ".x", "a->b.topics"])
def test_setting_names_cannot_reach_other_flows(bad: str) -> None:
    with pytest.raises(ConfigError):
        flow_keys("east->west", {bad: "x"})


def test_non_scalar_values_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"east->west\.topics"):
        flow_keys("east->west", {"topics": {"nested": 1}})


def test_a_new_cluster_is_added_and_a_known_one_cannot_be_repointed() -> None:
    config = MirrorMakerConfig.from_flat(BASE)
    keys = cluster_keys(config, {"north": {"bootstrap.servers": "n:1", "security.protocol": "PLAINTEXT"}})
    assert keys["clusters"] == "east,west,north"
    merged = layered(BASE, {**keys, **flow_keys("north->east", {"enabled": True})})
    assert merged.clusters["north"].bootstrap_servers == "n:1"
    assert merged.flow("north", "east").enabled
    assert cluster_keys(config, {"east": {"bootstrap.servers": "e:1"}}) == {}
    with pytest.raises(ClusterConflictError, match="e:1"):
        cluster_keys(config, {"east": {"bootstrap.servers": "elsewhere:1"}})
    with pytest.raises(ConfigError, match=r"north\.bootstrap\.servers"):
        cluster_keys(config, {"north": {}})


def test_the_state_file_round_trips_is_written_only_under_the_lock_and_reports_damage(tmp_path: Path) -> None:
    path = tmp_path / "state" / "flows.json"

    async def run() -> None:
        lock = asyncio.Lock()
        store = StateFile(path, lock)
        assert store.load() == {}
        store.section("states")["east->west"] = "PAUSED"
        with pytest.raises(StateFileLockError):
            store.write({"east->west.enabled": "true"})
        assert not path.exists()
        async with lock:
            store.write({"east->west.enabled": "true"})
            StateFile(None, lock).write({"x": 1})  # nowhere to write: nothing happens
        again = StateFile(path, lock)
        assert again.load() == {"east->west.enabled": "true"}
        assert again.section("states") == {"east->west": "PAUSED"}

    asyncio.run(run())
    assert json.loads(path.read_text())["version"] == 1
    store = StateFile(path, asyncio.Lock())
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="unreadable"):
        store.load()
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="'keys'"):
        store.load()
    assert StateFile(None, asyncio.Lock()).load() == {}
