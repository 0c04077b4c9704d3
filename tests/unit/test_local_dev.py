"""mm2py.kafka_local.dev without starting Kafka: where the dev clusters' files live, what ``status``
reads of a saved state (a recorded pid that is not our broker is down), and ``down`` stopping nothing
alive, deleting the clusters' data and forgetting them. (``mm2py dev up`` itself: the integration
test_harness.py runs it.)"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from mm2py.kafka_local import dev
from mm2py.kafka_local.cluster import KafkaCluster
from mm2py.kafka_local.layout import KafkaNode


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MM2PY_DEV_HOME", str(tmp_path / "dev"))
    return tmp_path / "dev"


def _cluster(home: Path, name: str, port: int, pid: int | None) -> KafkaCluster:
    workdir = home / name
    (workdir / "node-1").mkdir(parents=True)
    (workdir / "node-1" / "data.log").write_text("records")
    node = KafkaNode(1, port, port + 1, workdir / "node-1", pid=pid)
    return KafkaCluster(name, workdir, [node], "id-" + name)


def test_the_dev_home_is_the_override_or_under_the_cache(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert dev.dev_dir() == home
    monkeypatch.delenv("MM2PY_DEV_HOME")
    assert dev.dev_dir().name == "dev" and dev.dev_dir() != home


def test_nothing_saved_or_a_broken_state_file_reads_as_no_clusters(home: Path) -> None:
    assert dev.load() == [] and dev.status() == [] and dev.down() == []
    home.mkdir()
    (home / "state.json").write_text("{not json")
    assert dev.load() == []


def test_saved_clusters_whose_brokers_are_gone_are_down_and_down_deletes_them(home: Path) -> None:
    # our own pid is alive, but it is no broker of this cluster (a recycled pid): down all the same
    east, west = _cluster(home, "east", 19092, os.getpid()), _cluster(home, "west", 29092, None)
    dev._save([east, west])
    loaded = dev.load()
    assert [(c.name, c.bootstrap, c.cluster_id) for c in loaded] == [
        ("east", "127.0.0.1:19092", "id-east"), ("west", "127.0.0.1:29092", "id-west")]
    assert loaded[0].nodes[0].pid == os.getpid()
    statuses = dev.status()
    assert [(s.name, s.bootstrap, s.running, s.reachable) for s in statuses] == [
        ("east", "127.0.0.1:19092", False, False), ("west", "127.0.0.1:29092", False, False)]
    assert statuses[0].line().split() == ["east", "127.0.0.1:19092", "down"]
    assert dev.down() == ["east", "west"]
    assert not (home / "east").exists() and not (home / "west").exists()
    assert dev.load() == [] and not (home / "state.json").exists()


def test_a_status_line_says_up_starting_or_down() -> None:
    assert dev.DevStatus("east", "127.0.0.1:1", True, True).line().endswith(" up")
    assert dev.DevStatus("east", "127.0.0.1:1", True, False).line().endswith(" starting")
    assert dev.DevStatus("east", "127.0.0.1:1", False, False).line().endswith(" down")


def test_a_dev_port_in_use_is_replaced_by_a_free_one() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = dev._port_or_free(port)
        assert other != port and other > 0
        assert dev._reachable(f"127.0.0.1:{port}")
