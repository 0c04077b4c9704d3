"""The REST API steering a running worker, against real brokers and over real HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import (
    BackgroundWorker,
    create_topic,
    make_records,
    mirror_config,
    produce_records,
    topic_names,
    total,
    unique,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)


def _config(east: KafkaCluster, west: KafkaCluster) -> Any:
    """Clusters only: no flow is enabled until one is created over HTTP."""
    return mirror_config({"east": east.bootstrap, "west": west.bootstrap}, {},
                         **{"refresh.topics.interval.seconds": 300})


class Api:
    """A BackgroundWorker with the REST API served on its event loop."""

    def __init__(self, config: Any, **worker_options: Any) -> None:
        self.bg = BackgroundWorker(config, **worker_options)
        self.server: Any = None
        self.http: httpx.Client | None = None

    def __enter__(self) -> httpx.Client:
        from mm2py.rest_api.server import RestServer

        self.bg.__enter__()

        async def start() -> Any:
            server = RestServer(self.bg.worker, "127.0.0.1", 0)
            await server.start()
            return server

        self.server = self.bg.call(start)
        self.http = httpx.Client(base_url=self.server.url, timeout=120)
        return self.http

    def __exit__(self, *exc: object) -> None:
        if self.http is not None:
            self.http.close()
        if self.server is not None:
            self.bg.call(self.server.stop)
        self.bg.stop()


def _seed(east: KafkaCluster, name: str, n: int, partitions: int = 2) -> str:
    topic = create_topic(east.bootstrap, name, partitions=partitions)
    produce_records(east.bootstrap, topic, make_records(n, tag=name), compression="lz4")
    return topic


@pytest.fixture
def api(east: KafkaCluster, west: KafkaCluster) -> Iterator[httpx.Client]:
    with Api(_config(east, west)) as http:
        yield http


def test_create_a_flow_then_change_its_allow_and_deny_lists_while_it_runs(
    api: httpx.Client, east: KafkaCluster, west: KafkaCluster
) -> None:
    prefix = unique("rest")
    a, b = _seed(east, f"{prefix}-a", 50), _seed(east, f"{prefix}-b", 40)

    r = api.post("/flows", json={"source": "east", "target": "west", "topics": [a],
                                 "settings": {"tasks.max": 1}})
    assert r.status_code == 201, r.text
    body = r.json()
    assert (body["name"], body["state"]) == ("east->west", "RUNNING")
    assert set(body["topics"]) == {a}
    wait_until(lambda: total(west.bootstrap, f"east.{a}") == 50, 60, what="allowed topic mirrored")
    assert f"east.{b}" not in topic_names(west.bootstrap)
    assert [f["name"] for f in api.get("/flows").json()["flows"]] == ["east->west"]

    # widen the allow list: the running task takes the new topic, nothing restarts
    tasks_before = api.get("/flows/east/west").json()["tasks"]
    r = api.patch("/flows/east/west", json={"topics": f"{prefix}-.*"})
    assert r.status_code == 200, r.text
    assert set(r.json()["topics"]) == {a, b}
    wait_until(lambda: total(west.bootstrap, f"east.{b}") == 40, 60, what="newly allowed topic mirrored")
    # the task counts a batch when its acknowledgment arrives, a moment after the target's end
    # shows it: the count is read until it has both topics' records
    wait_until(lambda: api.get("/flows/east/west").json()["tasks"][0]["records"] >= 90, 60,
               what="the task's record count")
    tasks_after = api.get("/flows/east/west").json()["tasks"]
    assert [t["id"] for t in tasks_after] == [t["id"] for t in tasks_before]
    assert tasks_after[0]["records"] >= 90 and total(west.bootstrap, f"east.{a}") == 50

    # deny one topic: once the change is answered, its new records are no longer mirrored
    r = api.patch("/flows/east/west", json={"topics.exclude": [a]})
    assert r.status_code == 200, r.text
    assert set(r.json()["topics"]) == {b}
    produce_records(east.bootstrap, a, make_records(10, tag="late-a"))
    produce_records(east.bootstrap, b, make_records(10, tag="late-b"))
    wait_until(lambda: total(west.bootstrap, f"east.{b}") == 50, 60, what="allowed topic keeps flowing")
    assert total(west.bootstrap, f"east.{a}") == 50
    config = api.get("/flows/east/west/config").json()
    assert config["topics.exclude"] == [a] and config["topics"] == [f"{prefix}-.*"]

    metrics = api.get("/metrics")
    assert metrics.status_code == 200
    assert 'mm2py_task_records_total{flow="east->west"' in metrics.text

    assert api.delete("/flows/east/west").status_code == 204
    missing = api.get("/flows/east/west")
    assert missing.status_code == 404 and "no running flow 'east->west'" in missing.json()["error"]
    assert api.get("/flows").json() == {"flows": []}


def test_bad_requests_get_clear_errors_and_change_nothing(api: httpx.Client) -> None:
    r = api.post("/flows", content=b'{"source": "east", ', headers={"content-type": "application/json"})
    assert r.status_code == 422 and "not valid JSON" in r.json()["error"]

    r = api.post("/flows", json={"source": "east", "target": "west", "topcs": ["x"]})
    assert r.status_code == 422 and r.json()["error"] == "unknown field 'topcs'"

    r = api.post("/flows", json={"source": "east west", "target": "west"})
    assert r.status_code == 422 and "'source'" in r.json()["error"]

    r = api.post("/flows", json={"source": "east", "target": "west", "settings": {"tasks.max": "lots"}})
    assert r.status_code == 400 and r.json()["key"] == "east->west.tasks.max"

    r = api.post("/flows", json={"source": "east", "target": "west", "settings": {"tasks.mx": 2}})
    assert r.status_code == 400 and "did you mean 'tasks.max'" in r.json()["error"]

    r = api.post("/flows", json={"source": "east", "target": "west", "topics": ["orders(["]})
    assert r.status_code == 400 and r.json()["key"] == "east->west.topics"

    r = api.post("/flows", json={"source": "nowhere", "target": "west"})
    assert r.status_code == 400 and "no flow nowhere->west (clusters: east, west)" in r.json()["error"]

    r = api.post("/flows", json={"source": "east", "target": "west",
                                 "clusters": {"east": {"bootstrap.servers": "10.0.0.1:9092"}}})
    assert r.status_code == 409 and "cannot be re-pointed" in r.json()["error"]

    # a cluster that refuses connections: refused within seconds (mm2py.unreachable.timeout.ms,
    # not admin.timeout.ms), the error names it and the broker's reason, and no flow or cluster is
    # left behind
    started = time.monotonic()
    r = api.post("/flows", json={"source": "ghost", "target": "west",
                                 "clusters": {"ghost": {"bootstrap.servers": "127.0.0.1:1"}}})
    assert r.status_code == 503, r.text
    assert time.monotonic() - started < 10
    assert "'ghost'" in r.json()["error"] and "Connection refused" in r.json()["error"]
    assert api.get("/flows").json() == {"flows": []}
    assert [c["alias"] for c in api.get("/clusters").json()] == ["east", "west"]

    assert api.patch("/flows/east/west", json={"topics": ["x"]}).status_code == 404
    assert api.post("/flows/east/west/restart").status_code == 404
    assert api.delete("/flows/east/west").status_code == 404


def test_flows_created_over_http_survive_a_restart_with_a_state_file(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path
) -> None:
    topic = _seed(east, unique("kept"), 60)
    state = tmp_path / "flows.json"
    config = _config(east, west)
    with Api(config, state_file=str(state)) as http:
        r = http.post("/flows", json={"source": "east", "target": "west", "topics": [topic]})
        assert r.status_code == 201, r.text
        assert http.post("/flows", json={"source": "east", "target": "west"}).status_code == 409
        wait_until(lambda: total(west.bootstrap, f"east.{topic}") == 60, 60, what="mirrored")
        restarted = http.post("/flows/east/west/restart")
        assert restarted.status_code == 200 and restarted.json()["state"] == "RUNNING"
    assert json.loads(state.read_text())["keys"]["east->west.enabled"] == "true"

    produce_records(east.bootstrap, topic, make_records(25, tag="while-down"))
    with Api(config, state_file=str(state)) as http:
        assert [f["name"] for f in http.get("/flows").json()["flows"]] == ["east->west"]
        wait_until(lambda: total(west.bootstrap, f"east.{topic}") == 85, 60, what="resumed from state")
        assert http.delete("/flows/east/west").status_code == 204
    # exact resume: the second worker neither lost nor repeated anything
    assert total(west.bootstrap, f"east.{topic}") == 85

    with Api(config, state_file=str(state)) as http:
        assert http.get("/flows").json() == {"flows": []}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_run_serves_the_api_and_stops_cleanly(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path
) -> None:
    cfg = tmp_path / "clusters.properties"
    cfg.write_text(f"clusters = east, west\neast.bootstrap.servers = {east.bootstrap}\n"
                   f"west.bootstrap.servers = {west.bootstrap}\nreplication.factor = 1\n"
                   "checkpoints.topic.replication.factor = 1\noffset-syncs.topic.replication.factor = 1\n"
                   "heartbeats.topic.replication.factor = 1\nemit.heartbeats.enabled = false\n")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mm2py.cli", "run", "--config", str(cfg), "--rest-port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(2)]
        assert f"REST API: http://127.0.0.1:{port}" in lines[0], lines
        assert "no flow yet" in lines[1]
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=30)
        assert health.json() == {"status": "ok", "flows": {}}
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cli_refuses_a_port_in_use(east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"clusters: {{east: '{east.bootstrap}', west: '{west.bootstrap}'}}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "mm2py.cli", "run", "--config", str(cfg), "--rest-port", str(port)],
            capture_output=True, text=True, timeout=60,
        )
    assert proc.returncode == 2
    assert f"REST API cannot listen on 127.0.0.1:{port}" in proc.stderr


def test_a_consumer_group_is_moved_to_the_target_over_http(
    api: httpx.Client, east: KafkaCluster, west: KafkaCluster
) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CKTopicPartition

    topic = _seed(east, unique("failover"), 100, partitions=1)
    group = unique("billing")
    r = api.post("/flows", json={"source": "east", "target": "west", "topics": [topic],
                                 "settings": {"emit.checkpoints.interval.seconds": 1,
                                              "refresh.groups.interval.seconds": 1}})
    assert r.status_code == 201, r.text
    wait_until(lambda: total(west.bootstrap, f"east.{topic}") == 100, 60, what="mirrored")
    consumer = Consumer({"bootstrap.servers": east.bootstrap, "group.id": group})
    consumer.commit(offsets=[CKTopicPartition(topic, 0, 60)], asynchronous=False)
    consumer.close()

    def translated() -> list[dict[str, Any]]:
        got = api.get(f"/flows/east/west/groups/{group}/offsets")
        return list(got.json()["rows"]) if got.status_code == 200 else []

    def exact() -> bool:
        # a checkpoint taken before the mirror's progress passed 60 is behind; the next is exact
        rows = [(r["topic"], r["source_offset"], r["target_topic"], r["target_offset"]) for r in translated()]
        return rows == [(topic, 60, f"east.{topic}", 60)]

    wait_until(exact, 60, what="the group translated exactly")

    dry = api.post(f"/flows/east/west/groups/{group}/offsets", json={})
    assert dry.status_code == 200 and dry.json()["executed"] is False and dry.json()["previous"] == {}
    west_admin = AdminClientFor(west)
    assert west_admin.committed(group, f"east.{topic}") is None  # the dry run moved nothing

    moved = api.post(f"/flows/east/west/groups/{group}/offsets", json={"execute": True})
    assert moved.status_code == 200 and moved.json()["executed"] is True, moved.text
    assert west_admin.committed(group, f"east.{topic}") == 60

    unknown = api.get(f"/flows/east/west/groups/{unique('nobody')}/offsets")
    assert unknown.status_code == 404 and "unknown group" in unknown.json()["error"]
    bad = api.get(f"/flows/east/west/groups/{group}/offsets", params={"topic_regex": "(["})
    assert bad.status_code == 400 and bad.json()["key"] == "topic_regex"
    assert api.post(f"/flows/east/west/groups/{group}/offsets", json={"exec": True}).status_code == 422


class AdminClientFor:
    """Committed offsets of a group on a cluster (confluent-kafka)."""

    def __init__(self, cluster: KafkaCluster) -> None:
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def committed(self, group: str, topic: str) -> int | None:
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka import TopicPartition as CKTopicPartition

        request = [ConsumerGroupTopicPartitions(group, [CKTopicPartition(topic, 0)])]
        result = self.admin.list_consumer_group_offsets(request)[group].result(30)
        offset = result.topic_partitions[0].offset
        return None if offset < 0 else int(offset)
