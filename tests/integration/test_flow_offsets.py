"""A flow's offsets over HTTP, and the Kafka Connect-shaped facade, against real brokers.

Each test names its source cluster with a fresh alias, so its flow has a progress topic
(``mm2-offsets.<alias>.internal``) of its own and resets touch no other test's positions.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import (
    BackgroundWorker,
    Rec,
    create_topic,
    end_offsets,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    served_worker,
    unique,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)


@contextmanager
def serving(east: KafkaCluster, west: KafkaCluster, alias: str) -> Iterator[httpx.Client]:
    """A worker knowing ``alias`` (the east cluster) and west, no flow yet, with its REST API."""
    config = mirror_config({alias: east.bootstrap, "west": west.bootstrap}, {},
                           **{"refresh.topics.interval.seconds": 300, "emit.checkpoints.enabled": False})
    with served_worker(config) as url, httpx.Client(base_url=url, timeout=120) as http:
        yield http


def _settled(west: KafkaCluster, topic: str, counts: dict[int, int]) -> None:
    """The target partitions reach ``counts``. Whether they stay there is judged where the test
    knows the task has nothing more to send: its committed position at the source's end, or its
    worker stopped (everything sent has landed)."""
    wait_until(lambda: end_offsets(west.bootstrap, topic) == counts, 60, 0.2, f"{topic} at {counts}")


def _content(records: list[Rec]) -> list[tuple[object, ...]]:
    return [r.content() for r in records]


def test_offsets_read_then_reset_to_earliest_and_latest_while_stopped(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    alias = unique("src")
    topic = create_topic(east.bootstrap, unique("offsets"), partitions=2)
    remote = f"{alias}.{topic}"
    a0, a1 = make_records(20, partition=0, tag="a0"), make_records(10, partition=1, tag="a1")
    produce_records(east.bootstrap, topic, a0 + a1)
    with serving(east, west, alias) as http:
        r = http.post("/flows", json={"source": alias, "target": "west", "topics": [topic]})
        assert r.status_code == 201, r.text
        path = f"/flows/{alias}/west"

        def positions() -> dict[int, tuple[Any, Any]]:
            body = http.get(f"{path}/offsets").json()
            return {o["partition"]: (o["position"], o["target_offset"]) for o in body["offsets"]
                    if o["topic"] == topic and o["target_topic"] == remote}

        wait_until(lambda: positions() == {0: (20, 20), 1: (10, 10)}, 60, what="positions committed")

        # running: refused, and nothing changes
        r = http.patch(f"{path}/offsets", json={"offsets": [{"topic": topic, "partition": 0,
                                                              "offset": "earliest"}]})
        assert r.status_code == 409 and "STOPPED" in r.json()["error"], r.text
        assert positions() == {0: (20, 20), 1: (10, 10)}

        assert http.post(f"{path}/stop").json()["state"] == "STOPPED"
        b1 = make_records(5, partition=1, tag="b1")  # produced while stopped, then skipped
        produce_records(east.bootstrap, topic, b1)
        r = http.patch(f"{path}/offsets", json={"offsets": [
            {"topic": topic, "partition": 0, "offset": "earliest"},
            {"topic": topic, "partition": 1, "offset": "latest"}]})
        assert r.status_code == 200, r.text
        assert positions() == {0: (0, 20), 1: (15, 10)}
        bad = http.patch(f"{path}/offsets", json={"offsets": [{"topic": topic, "partition": 0,
                                                                "offset": 99}]})
        assert bad.status_code == 400 and "outside the source log (0..20)" in bad.json()["error"]

        assert http.post(f"{path}/resume").json()["state"] == "RUNNING"
        c1 = make_records(5, partition=1, tag="c1")
        produce_records(east.bootstrap, topic, c1)
        _settled(west, remote, {0: 40, 1: 15})
        wait_until(lambda: positions() == {0: (20, 40), 1: (20, 15)}, 60, what="positions after resume")
        target = read_all(west.bootstrap, remote)
        assert [r.content() for r in target if r.partition == 0] == _content(a0 + a0)  # again, in order
        assert [r.content() for r in target if r.partition == 1] == _content(a1 + c1)  # b1 skipped

        # DELETE forgets every position (only while stopped)
        assert http.delete(f"{path}/offsets").status_code == 409
        http.post(f"{path}/stop")
        r = http.delete(f"{path}/offsets")
        assert r.status_code == 200 and {o["position"] for o in r.json()["offsets"]} == {None}
        assert positions() == {}


def test_connect_facade_creates_pauses_resumes_stops_and_deletes_a_mirror_source_connector(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    alias = unique("cs")
    topic = create_topic(east.bootstrap, unique("connect"), partitions=1)
    remote = f"{alias}.{topic}"
    first = make_records(10, partition=0, tag="first")
    produce_records(east.bootstrap, topic, first)
    config = {
        "connector.class": "org.apache.kafka.connect.mirror.MirrorSourceConnector",
        "source.cluster.alias": alias, "target.cluster.alias": "west",
        "source.cluster.bootstrap.servers": east.bootstrap,
        "target.cluster.bootstrap.servers": west.bootstrap,
        "topics": topic, "tasks.max": "1", "replication.policy.separator": ".",
    }
    with serving(east, west, unique("other")) as http:
        r = http.post("/connectors", json={"name": "mirror", "config": config})
        assert r.status_code == 201, r.text
        assert r.json()["type"] == "source" and r.json()["config"]["topics"] == topic
        assert http.post("/connectors", json={"name": "mirror", "config": config}).status_code == 409
        assert "mirror" in http.get("/connectors").json()
        status = http.get("/connectors/mirror/status").json()
        port = http.base_url.port
        version = http.get("/").json()["version"]
        assert status == {"name": "mirror", "type": "source",
                          "connector": {"state": "RUNNING", "worker_id": f"127.0.0.1:{port}",
                                        "version": version},
                          "tasks": [{"id": 0, "state": "RUNNING", "worker_id": f"127.0.0.1:{port}",
                                     "version": version}]}
        expanded = http.get("/connectors", params={"expand": ["status", "info"]}).json()
        assert expanded["mirror"]["status"] == status
        assert expanded["mirror"]["info"]["tasks"] == [{"connector": "mirror", "task": 0}]
        _settled(west, remote, {0: 10})

        assert http.put("/connectors/mirror/pause").status_code == 202
        paused = http.get("/connectors/mirror/status").json()
        assert paused["connector"]["state"] == "PAUSED" and paused["tasks"][0]["state"] == "PAUSED"
        second = make_records(10, partition=0, tag="second")
        produce_records(east.bootstrap, topic, second)
        time.sleep(1.0)  # two fetch waits (500 ms): a task still running would have copied them
        assert end_offsets(west.bootstrap, remote) == {0: 10}  # nothing while paused
        assert http.put("/connectors/mirror/resume").status_code == 202
        _settled(west, remote, {0: 20})
        assert [r.content() for r in read_all(west.bootstrap, remote)] == _content(first + second)

        r = http.get("/connectors/mirror/offsets")
        assert r.json() == {"offsets": [{"partition": {"cluster": alias, "partition": 0, "topic": topic},
                                         "offset": {"offset": 19}}]}
        assert http.request("DELETE", "/connectors/mirror/offsets").status_code == 400  # not STOPPED
        assert http.put("/connectors/mirror/stop").status_code == 204  # Connect 4.1's answer
        assert http.get("/connectors/mirror/status").json()["connector"]["state"] == "STOPPED"
        assert http.get("/connectors/mirror/status").json()["tasks"] == []

        assert http.delete("/connectors/mirror").status_code == 204
        gone = http.get("/connectors/mirror/status")
        assert gone.status_code == 404 and gone.json()["error_code"] == 404
        assert http.get(f"/flows/{alias}/west").status_code == 404

        r = http.post("/connectors", json={"name": "jdbc", "config": {
            "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector"}})
        assert r.status_code == 400 and r.json()["error_code"] == 400
        assert "not supported" in r.json()["message"]
        assert http.get("/connectors").json() == []


def test_cli_reads_and_resets_the_positions_of_a_flow_no_worker_runs(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from mm2py.cli import main
    from mm2py.config.models import load_config

    alias = unique("cli")
    topic = create_topic(east.bootstrap, unique("cli"), partitions=1)
    remote = f"{alias}.{topic}"
    records = make_records(10, partition=0, tag="cli")
    produce_records(east.bootstrap, topic, records)
    path = tmp_path / "mm2.properties"
    path.write_text("\n".join([
        f"clusters = {alias}, west", f"{alias}.bootstrap.servers = {east.bootstrap}",
        f"west.bootstrap.servers = {west.bootstrap}", f"{alias}->west.enabled = true",
        f"{alias}->west.topics = {topic}", "emit.checkpoints.enabled = false",
        "emit.heartbeats.enabled = false", "replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1", "checkpoints.topic.replication.factor = 1",
    ]) + "\n")
    flow = ["-c", str(path), "--flow", f"{alias}->west"]

    def cli(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    def position() -> tuple[int, int]:
        code, out, _ = cli("flow-offsets", "get", *flow, "--json")
        assert code == 0
        (row,) = [r for r in json.loads(out) if r["topic"] == topic]
        return row["position"], row["target_offset"]

    with BackgroundWorker(load_config(str(path))):
        _settled(west, remote, {0: 10})
    assert position() == (10, 10)
    code, out, _ = cli("flow-offsets", "get", *flow, "--name", "mirror-other", "--json")
    assert code == 0 and json.loads(out) == []  # a named flow of the pair: positions of its own

    code, out, err = cli("flow-offsets", "reset", *flow, "--partition", f"{topic}:0", "--to", "3")
    assert code == 0 and "dry run" in err and f"{topic}  0          3" in out
    assert position() == (10, 10)  # a dry run writes nothing
    assert cli("flow-offsets", "reset", *flow, "-p", f"{topic}:0", "--to", "3", "--execute")[0] == 0
    assert position() == (3, 10)
    code, _, err = cli("flow-offsets", "reset", *flow, "-p", f"{topic}:0", "--to", "99")
    assert code == 2 and "outside the source log (0..10)" in err
    code, _, err = cli("flow-offsets", "reset", *flow, "-p", topic, "--to", "3")
    assert code == 2 and "TOPIC:N" in err

    with BackgroundWorker(load_config(str(path))):  # resumes at 3: offsets 3..9 once more, in order
        _settled(west, remote, {0: 17})
    assert [r.content() for r in read_all(west.bootstrap, remote)] == _content(records + records[3:])
