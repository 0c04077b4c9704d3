"""The Kafka Connect facade answering Connect 4.1's calls, against real brokers over real HTTP:
``GET /``, the connector plugins and their validation, KIP-980 initial states, KIP-477 PATCH,
KIP-558 active topics, task status, ``/admin/loggers`` (KIP-495), and Connect's error bodies.

Each test names its source cluster (the ``east`` cluster) with a fresh alias, so its flow has a
progress topic of its own.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

import mm2py
from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import (
    admin,
    create_topic,
    make_records,
    mirror_config,
    produce_records,
    served_worker,
    topic_names,
    total,
    unique,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)

SOURCE = "org.apache.kafka.connect.mirror.MirrorSourceConnector"


@contextmanager
def serving(east: KafkaCluster, west: KafkaCluster, alias: str) -> Iterator[httpx.Client]:
    """A worker knowing ``alias`` (the east cluster, configured first) and west, no flow yet."""
    config = mirror_config({alias: east.bootstrap, "west": west.bootstrap}, {},
                           **{"refresh.topics.interval.seconds": 300, "emit.checkpoints.enabled": False,
                              "emit.heartbeats.enabled": False})
    with served_worker(config) as url, \
            httpx.Client(base_url=url, timeout=120, follow_redirects=False) as http:
        yield http


def _source(alias: str, east: KafkaCluster, west: KafkaCluster, **extra: str) -> dict[str, str]:
    return {"connector.class": SOURCE, "source.cluster.alias": alias, "target.cluster.alias": "west",
            "source.cluster.bootstrap.servers": east.bootstrap,
            "target.cluster.bootstrap.servers": west.bootstrap, "tasks.max": "1", **extra}


def _connect_error(r: httpx.Response, status: int) -> str:
    """The message of a Connect-shaped error body with ``status``."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error_code", "message"} and body["error_code"] == status, body
    return str(body["message"])


def _cluster_id(cluster: KafkaCluster) -> str:
    return str(admin(cluster.bootstrap).list_topics(timeout=10).cluster_id)


def test_root_plugins_and_unknown_routes_answer_as_connect(east: KafkaCluster, west: KafkaCluster) -> None:
    alias = unique("root")
    with serving(east, west, alias) as http:
        root = http.get("/").json()
        repo = Path(mm2py.__file__).resolve().parent.parent
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=False).stdout.strip()
        assert root["version"] == mm2py.__version__
        assert root["commit"] == (head[:16] if (repo / ".git").exists() and head else "unknown")
        # no flow yet: the first configured cluster; then the cluster the flows write to
        assert root["kafka_cluster_id"] == _cluster_id(east) != _cluster_id(west)
        r = http.post("/connectors", json={"name": "m", "config": _source(alias, east, west, topics="none")})
        assert r.status_code == 201, r.text
        assert http.get("/").json()["kafka_cluster_id"] == _cluster_id(west)

        plugins = http.get("/connector-plugins").json()
        assert [p["class"].rsplit(".", 1)[1] for p in plugins] == [
            "MirrorCheckpointConnector", "MirrorHeartbeatConnector", "MirrorSourceConnector"]
        assert {(p["type"], p["version"]) for p in plugins} == {("source", mm2py.__version__)}
        assert http.get("/connector-plugins", params={"connectorsOnly": "false"}).json() == plugins
        for name in (SOURCE, "MirrorSourceConnector", "MirrorSource"):
            keys = http.get(f"/connector-plugins/{name}/config").json()
            assert {"topics", "tasks.max", "replication.policy.class"} <= {k["name"] for k in keys}
            assert all(set(k) == {"name", "type", "required", "default_value", "importance",
                                  "documentation", "group", "order", "width", "display_name",
                                  "dependents"} for k in keys)
        _connect_error(http.get("/connector-plugins/JdbcSourceConnector/config"), 404)

        assert _connect_error(http.get("/connectors/m/nothing"), 404) == "HTTP 404 Not Found"
        assert _connect_error(http.delete("/connector-plugins"), 405) == "HTTP 405 Method Not Allowed"
        _connect_error(http.get("/admin/nothing"), 404)
        _connect_error(http.get("/connectors/m/tasks/first/status"), 404)
        for path in ("/connectors/", "/connectors/m/", "/connectors/m/status/", "/connector-plugins/"):
            assert http.get(path).status_code == 200, path  # answered, not redirected
        assert http.get("/connectors/").json() == ["m"]
        assert http.get(f"/flows/{alias}/west/").status_code == 200


def test_validate_reports_each_problem_on_its_key_and_an_invalid_config_is_not_created(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    alias = unique("val")
    with serving(east, west, alias) as http:
        bad = {**_source(alias, east, west), "name": "broken", "tasks.max": "0", "topics": "orders([",
               "tasks.mx": "2", "replication.policy.class": "com.example.MyPolicy"}
        r = http.put("/connector-plugins/MirrorSourceConnector/config/validate", json=bad)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["name"] == SOURCE and body["error_count"] == 4
        assert {"Common", "Error Handling"} <= set(body["groups"])
        errors = {c["value"]["name"]: c["value"]["errors"] for c in body["configs"] if c["value"]["errors"]}
        assert sorted(errors) == ["replication.policy.class", "tasks.max", "tasks.mx", "topics"]
        assert "did you mean 'tasks.max'" in errors["tasks.mx"][0]
        undefined = [c for c in body["configs"] if c["definition"] is None]
        assert [c["value"]["name"] for c in undefined] == ["tasks.mx"]
        assert all(set(c["value"]) == {"name", "value", "recommended_values", "errors", "visible"}
                   for c in body["configs"])

        r = http.post("/connectors", json={"name": "broken", "config": bad})
        assert "tasks.mx" in _connect_error(r, 400)
        assert http.get("/connectors").json() == []
        assert http.get(f"/flows/{alias}/west").status_code == 404

        good = {**_source(alias, east, west), "name": "fine"}
        r = http.put(f"/connector-plugins/{SOURCE}/config/validate", json=good)
        assert r.json()["error_count"] == 0, r.text
        values = {c["value"]["name"]: c["value"]["value"] for c in r.json()["configs"]}
        assert values["tasks.max"] == "1" and values["offset-syncs.topic.location"] == "source"
        _connect_error(http.put("/connector-plugins/MirrorHeartbeat/config/validate", json=good), 400)
        no_class = {k: v for k, v in good.items() if k != "connector.class"}
        _connect_error(http.put("/connector-plugins/MirrorSource/config/validate", json=no_class), 400)


def test_a_connector_created_stopped_mirrors_only_once_resumed_and_lists_its_topics(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    alias = unique("stp")
    topic = create_topic(east.bootstrap, unique("kip980"), partitions=2)
    remote = f"{alias}.{topic}"
    produce_records(east.bootstrap, topic, make_records(20, tag="first"))
    config = _source(alias, east, west, topics=topic, **{"topics.exclude": "nothing\\..*"})
    with serving(east, west, alias) as http:
        r = http.post("/connectors", json={"name": "m", "config": config, "initial_state": "stopped"})
        assert r.status_code == 201 and r.headers["location"] == "/connectors/m", r.text
        status = http.get("/connectors/m/status").json()
        assert status["connector"]["state"] == "STOPPED" and status["tasks"] == []
        assert status["connector"]["version"] == mm2py.__version__
        _connect_error(http.get("/connectors/m/tasks/0/status"), 404)
        time.sleep(1.5)  # three fetch waits: a task started anyway would have created the remote topic
        assert remote not in topic_names(west.bootstrap)
        assert http.get("/connectors/m/topics").json() == {"m": {"topics": []}}

        assert http.put("/connectors/m/resume").status_code == 202
        wait_until(lambda: total(west.bootstrap, remote) == 20, 60, 0.2, "mirrored after resume")
        task = http.get("/connectors/m/tasks/0/status").json()
        assert task == http.get("/connectors/m/status").json()["tasks"][0]
        assert task["state"] == "RUNNING" and task["version"] == mm2py.__version__
        wait_until(lambda: http.get("/connectors/m/topics").json() == {"m": {"topics": [remote]}}, 30,
                   0.2, "the remote topic listed")

        assert http.put("/connectors/m/topics/reset").status_code == 202
        assert http.get("/connectors/m/topics").json() == {"m": {"topics": []}}
        produce_records(east.bootstrap, topic, make_records(4, tag="again"))
        wait_until(lambda: http.get("/connectors/m/topics").json()["m"]["topics"] == [remote], 30, 0.2,
                   "the topic recorded again once written to")

        r = http.patch("/connectors/m/config", json={"tasks.max": "2", "topics.exclude": None})
        assert r.status_code == 200, r.text
        assert r.json()["config"]["tasks.max"] == "2" and "topics.exclude" not in r.json()["config"]
        assert "topics.exclude" not in http.get("/connectors/m/config").json()
        wait_until(lambda: len(http.get("/connectors/m/status").json()["tasks"]) == 2, 60, 0.2, "two tasks")
        assert "tasks.max" in _connect_error(http.patch("/connectors/m/config", json={"tasks.max": "0"}), 400)
        assert http.get("/connectors/m/config").json()["tasks.max"] == "2"
        _connect_error(http.patch("/connectors/nobody/config", json={"tasks.max": "2"}), 404)

        assert http.put("/connectors/m/stop").status_code == 204
        assert http.get("/connectors/m/status").json()["connector"]["state"] == "STOPPED"
        assert http.delete("/connectors/m").status_code == 204
        assert http.get("/connectors/m/topics").json() == {"m": {"topics": []}}  # unknown: none


def test_a_connector_created_paused_runs_no_task_until_resumed(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    alias = unique("pau")
    topic = create_topic(east.bootstrap, unique("paused"), partitions=1)
    remote = f"{alias}.{topic}"
    produce_records(east.bootstrap, topic, make_records(5, tag="p"))
    with serving(east, west, alias) as http:
        r = http.post("/connectors", json={"name": "p", "config": _source(alias, east, west, topics=topic),
                                           "initial_state": "PAUSED"})
        assert r.status_code == 201, r.text
        status = http.get("/connectors/p/status").json()
        assert (status["connector"]["state"], status["tasks"]) == ("PAUSED", [])
        time.sleep(1.5)
        assert remote not in topic_names(west.bootstrap)
        assert http.put("/connectors/p/resume").status_code == 202
        wait_until(lambda: total(west.bootstrap, remote) == 5, 60, 0.2, "mirrored after resume")
        assert http.get("/connectors/p/status").json()["connector"]["state"] == "RUNNING"

        # a heartbeat connector has a state of its own, as in Connect: no heartbeat while halted
        heartbeat = {**_source(alias, east, west), "connector.class": "MirrorHeartbeatConnector",
                     "emit.heartbeats.interval.seconds": "1"}
        r = http.post("/connectors", json={"name": "h", "config": heartbeat, "initial_state": "STOPPED"})
        assert r.status_code == 201, r.text
        status = http.get("/connectors/h/status").json()
        assert (status["connector"]["state"], status["tasks"]) == ("STOPPED", [])
        assert http.put("/connectors/h/resume").status_code == 202
        assert http.get("/connectors/h/status").json()["connector"]["state"] == "RUNNING"
        wait_until(lambda: http.get("/connectors/h/topics").json()["h"]["topics"] == ["heartbeats"], 30, 0.2,
                   "heartbeats once resumed")
        assert http.put("/connectors/h/pause").status_code == 202
        status = http.get("/connectors/h/status").json()
        assert [status["connector"]["state"]] + [t["state"] for t in status["tasks"]] == ["PAUSED", "PAUSED"]
        assert http.put("/connectors/h/topics/reset").status_code == 202
        time.sleep(2.5)  # two heartbeat intervals: a heartbeat emitted anyway would be recorded
        assert http.get("/connectors/h/topics").json()["h"]["topics"] == []
        r = http.put("/connectors/h/config", json=heartbeat)  # a new config leaves it paused
        assert r.status_code == 200, r.text
        assert http.get("/connectors/h/status").json()["connector"]["state"] == "PAUSED"
        assert http.post("/connectors/h/restart").status_code == 204
        assert http.put("/connectors/h/resume").status_code == 202
        wait_until(lambda: http.get("/connectors/h/topics").json()["h"]["topics"] == ["heartbeats"], 30, 0.2,
                   "heartbeats again once resumed")
        assert http.post("/connectors/h/tasks/0/restart").status_code == 204
        assert http.get("/connectors/h/status").json()["connector"]["state"] == "RUNNING"
        running = _source(unique("run"), east, west, topics="nothing")
        r = http.post("/connectors", json={"name": "r", "config": running, "initial_state": "RUNNING"})
        assert r.status_code == 201, r.text
        assert http.get("/connectors/r/status").json()["connector"]["state"] == "RUNNING"


@pytest.fixture
def engine_levels() -> Iterator[None]:
    """The levels of mm2py.engine's loggers as they were, after the test changed them over HTTP."""
    names = ["mm2py.engine", *(n for n in logging.root.manager.loggerDict if n.startswith("mm2py.engine."))]
    before = {n: logging.getLogger(n).level for n in names}
    yield
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


def test_log_levels_change_at_run_time_and_a_heartbeat_connector_lists_its_topic(
    east: KafkaCluster, west: KafkaCluster, caplog: pytest.LogCaptureFixture, engine_levels: None
) -> None:
    alias = unique("log")
    heartbeat = {**_source(alias, east, west), "connector.class": "MirrorHeartbeatConnector",
                 "emit.heartbeats.interval.seconds": "1"}
    scheduler = "mm2py.engine.scheduler"

    def beats_logged() -> int:  # the scheduler's DEBUG line after each heartbeat it emitted
        return sum(1 for r in caplog.records if r.name == scheduler and r.levelno == logging.DEBUG
                   and "emit heartbeat" in r.getMessage())

    with serving(east, west, alias) as http:
        assert http.put("/admin/loggers/mm2py.engine", json={"level": "INFO"}).status_code == 200
        assert http.post("/connectors", json={"name": "h", "config": heartbeat}).status_code == 201
        wait_until(lambda: http.get("/connectors/h/topics").json() == {"h": {"topics": ["heartbeats"]}},
                   30, 0.2, "heartbeats written")
        assert beats_logged() == 0  # emitted, not logged at INFO

        r = http.put("/admin/loggers/mm2py.engine", json={"level": "debug"})
        assert r.status_code == 200 and {"mm2py.engine", scheduler} <= set(r.json()), r.text
        shown = http.get(f"/admin/loggers/{scheduler}").json()
        assert shown["level"] == "DEBUG" and abs(shown["last_modified"] / 1000 - time.time()) < 60
        assert http.get("/admin/loggers").json()[scheduler]["level"] == "DEBUG"
        assert logging.getLogger(scheduler).isEnabledFor(logging.DEBUG)
        wait_until(lambda: beats_logged() >= 2, 30, 0.2, "heartbeats logged at DEBUG")
        assert http.put("/admin/loggers/mm2py.engine", json={"level": "DEBUG"}).json() == []  # no change

        assert http.put("/admin/loggers/mm2py.engine", params={"scope": "cluster"},
                        json={"level": "INFO"}).status_code == 204
        seen = beats_logged()
        time.sleep(2.5)
        assert beats_logged() == seen and http.get(f"/admin/loggers/{scheduler}").json()["level"] == "INFO"

        assert http.put("/connectors/h/topics/reset").status_code == 202
        assert http.get("/connectors/h/topics").json() == {"h": {"topics": []}}
        wait_until(lambda: http.get("/connectors/h/topics").json()["h"]["topics"] == ["heartbeats"], 30, 0.2,
                   "the next heartbeat records it again")

        _connect_error(http.put("/admin/loggers/mm2py", json={"level": "LOUD"}), 404)
        _connect_error(http.put("/admin/loggers/mm2py", json={"lvl": "INFO"}), 400)
        _connect_error(http.get("/admin/loggers/no.such.logger"), 404)
        assert http.get("/admin/loggers/root").json()["level"] in {"FATAL", "ERROR", "WARN", "INFO",
                                                                    "DEBUG", "TRACE", "ALL"}
