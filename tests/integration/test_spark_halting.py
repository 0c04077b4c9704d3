"""Pausing, stopping, resuming and moving the offsets of flows the Spark runtime runs (embedded
local Spark, real brokers), over ``/flows`` and Kafka Connect's ``/connectors``: the same calls and
the same outcome as with the in-process runtime.

Each test names its source cluster with a fresh alias, so its flow has a progress topic of its own
(``mm2-offsets.<alias>.internal``) and a reset touches no other test's positions. Nothing waits on
the clock: "the target stops growing" is judged after the driver's lease loop has run several
steps with no lease of the paused flow holding a partition.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest

from mm2py.kafka_local import KafkaCluster
from mm2py.runtime.spark.driver.lease_scheduler import LeaseScheduler, LeaseSettings
from mm2py.runtime.spark.driver.worker import SparkWorker
from tests.support.brokers import (
    Rec,
    create_topic,
    end_offsets,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    unique,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def spark(local_spark: Any) -> Any:
    return local_spark


class SparkRest:
    """A SparkWorker (leases) knowing ``alias`` (the east cluster) and west, no flow yet, with its
    REST API; both on one event loop in a thread, as ``mm2py run --runtime spark`` runs them."""

    def __init__(self, spark: Any, east: KafkaCluster, west: KafkaCluster, alias: str,
                 mode: str = "leases") -> None:
        config = mirror_config({alias: east.bootstrap, "west": west.bootstrap}, {},
                               **{"refresh.topics.interval.seconds": 300, "emit.checkpoints.enabled": False})
        self.worker = SparkWorker(config, spark=spark, idle_seconds=0.2, commit_interval=0.5, mode=mode,
                                  round_seconds=5, leases=LeaseSettings(60, commit_interval=0.5))
        self._done = threading.Event()
        self._ready = threading.Event()
        self._url: list[str] = []
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._main, daemon=True)

    async def _serve(self) -> None:
        from mm2py.rest_api.server import RestServer

        stop = asyncio.Event()
        server = RestServer(self.worker, "127.0.0.1", 0)
        await server.start()
        self._url.append(server.url)
        running = asyncio.create_task(self.worker.run(stop, status_interval=3600))
        try:
            while not self._done.is_set() and not running.done():
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await running
            await server.stop()

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            self._ready.set()

    @property
    def leases(self) -> LeaseScheduler:
        assert self.worker.leases is not None
        return self.worker.leases

    def __enter__(self) -> httpx.Client:
        self._thread.start()
        wait_until(lambda: self.errors or (self._url and (
            self.worker.leases is not None or self.worker.mode == "rounds")), 120, 0.1,
                   "the Spark worker and its REST API")
        assert not self.errors, self.errors
        self.http = httpx.Client(base_url=self._url[0], timeout=120)
        return self.http

    def __exit__(self, *exc: object) -> None:
        self.http.close()
        self._done.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the Spark worker did not stop"
        assert not self.errors, self.errors

    def quiet(self, flow: str, steps: int = 5) -> None:
        """Wait until the lease loop has run ``steps`` steps since now, no lease of ``flow``
        holding a partition all the while, and none started."""
        started, first = self.leases.started, self.leases.steps
        wait_until(lambda: self.leases.steps >= first + steps, 30, 0.05, "the lease loop's steps")
        assert not self.leases.writing(flow) and self.leases.started == started


def _content(records: list[Rec]) -> list[tuple[object, ...]]:
    return [r.content() for r in records]


def _target(west: KafkaCluster, remote: str, partition: int) -> list[tuple[object, ...]]:
    return [r.content() for r in read_all(west.bootstrap, remote) if r.partition == partition]


def _settled(west: KafkaCluster, remote: str, counts: dict[int, int]) -> None:
    wait_until(lambda: end_offsets(west.bootstrap, remote) == counts, 90, 0.2, f"{remote} at {counts}")


def test_pause_holds_the_target_while_the_source_grows_and_resume_catches_up_exactly(
    east: KafkaCluster, west: KafkaCluster, spark: Any
) -> None:
    alias = unique("spkp")
    topic = create_topic(east.bootstrap, unique("pause"), partitions=2)
    remote, name, path = f"{alias}.{topic}", f"{alias}->west", f"/flows/{alias}/west"
    a = {p: make_records(30, partition=p, tag=f"a{p}") for p in (0, 1)}
    produce_records(east.bootstrap, topic, a[0] + a[1])
    run = SparkRest(spark, east, west, alias)
    with run as http:
        r = http.post("/flows", json={"source": alias, "target": "west", "topics": [topic],
                                     "settings": {"tasks.max": 2}})
        assert r.status_code == 201, r.text
        _settled(west, remote, {0: 30, 1: 30})

        r = http.post(f"{path}/pause")
        assert r.status_code == 200 and r.json()["state"] == "PAUSED", r.text
        # the leases ended with their positions committed before the call returned
        assert not run.leases.writing(name)
        offsets = http.get(f"{path}/offsets").json()["offsets"]
        assert {o["partition"]: o["position"] for o in offsets if o["topic"] == topic} == {0: 30, 1: 30}
        b = {p: make_records(20, partition=p, tag=f"b{p}") for p in (0, 1)}
        produce_records(east.bootstrap, topic, b[0] + b[1])
        assert end_offsets(east.bootstrap, topic) == {0: 50, 1: 50}
        run.quiet(name)  # the source grew; no lease of the paused flow ran meanwhile
        assert end_offsets(west.bootstrap, remote) == {0: 30, 1: 30}
        assert http.get(path).json()["state"] == "PAUSED"

        r = http.post(f"{path}/resume")
        assert r.status_code == 200 and r.json()["state"] == "RUNNING", r.text
        _settled(west, remote, {0: 50, 1: 50})
        # the task counters go on from where the paused leases left them: nothing copied twice
        wait_until(lambda: sum(t["records"] for t in http.get(path).json()["tasks"]) == 100, 30, 0.2,
                   "the resumed leases' reports")
    for p in (0, 1):  # exact resume: each record once, in order
        assert _target(west, remote, p) == _content(a[p] + b[p])


def test_stop_move_one_partition_to_earliest_and_resume(
    east: KafkaCluster, west: KafkaCluster, spark: Any
) -> None:
    alias = unique("spks")
    topic = create_topic(east.bootstrap, unique("move"), partitions=3)
    remote, name, path = f"{alias}.{topic}", f"{alias}->west", f"/flows/{alias}/west"
    a = {p: make_records(25, partition=p, tag=f"a{p}") for p in (0, 1, 2)}
    produce_records(east.bootstrap, topic, a[0] + a[1] + a[2])
    run = SparkRest(spark, east, west, alias)
    with run as http:
        r = http.post("/flows", json={"source": alias, "target": "west", "topics": [topic],
                                     "settings": {"tasks.max": 2}})
        assert r.status_code == 201, r.text
        _settled(west, remote, {0: 25, 1: 25, 2: 25})
        move = {"offsets": [{"topic": topic, "partition": 1, "offset": "earliest"}]}
        r = http.patch(f"{path}/offsets", json=move)
        assert r.status_code == 409 and "STOPPED" in r.json()["error"], r.text  # running: refused

        assert http.post(f"{path}/stop").json()["state"] == "STOPPED"
        assert not run.leases.writing(name)
        b = {p: make_records(10, partition=p, tag=f"b{p}") for p in (0, 1, 2)}
        produce_records(east.bootstrap, topic, b[0] + b[1] + b[2])
        r = http.patch(f"{path}/offsets", json=move)
        assert r.status_code == 200, r.text
        assert [(o["partition"], o["position"], o["target_offset"]) for o in r.json()["offsets"]] \
            == [(1, 0, 25)]
        run.quiet(name)
        assert end_offsets(west.bootstrap, remote) == {0: 25, 1: 25, 2: 25}

        assert http.post(f"{path}/resume").json()["state"] == "RUNNING"
        _settled(west, remote, {0: 35, 1: 60, 2: 35})
    assert _target(west, remote, 1) == _content(a[1] + a[1] + b[1])  # again from its start, in order
    for p in (0, 2):
        assert _target(west, remote, p) == _content(a[p] + b[p])  # the others once


def test_connect_facade_pauses_stops_forgets_offsets_and_resumes_a_spark_flow(
    east: KafkaCluster, west: KafkaCluster, spark: Any
) -> None:
    alias = unique("spkc")
    topic = create_topic(east.bootstrap, unique("forget"), partitions=2)
    remote, name = f"{alias}.{topic}", f"{alias}->west"
    a = {p: make_records(15, partition=p, tag=f"a{p}") for p in (0, 1)}
    produce_records(east.bootstrap, topic, a[0] + a[1])
    config = {
        "connector.class": "org.apache.kafka.connect.mirror.MirrorSourceConnector",
        "source.cluster.alias": alias, "target.cluster.alias": "west",
        "source.cluster.bootstrap.servers": east.bootstrap,
        "target.cluster.bootstrap.servers": west.bootstrap,
        "topics": topic, "tasks.max": "2", "replication.policy.separator": ".",
    }
    run = SparkRest(spark, east, west, unique("other"))
    with run as http:
        r = http.post("/connectors", json={"name": "mirror", "config": config})
        assert r.status_code == 201, r.text
        _settled(west, remote, {0: 15, 1: 15})

        assert http.put("/connectors/mirror/pause").status_code == 202
        status = http.get("/connectors/mirror/status").json()
        assert status["connector"]["state"] == "PAUSED"
        assert {t["state"] for t in status["tasks"]} == {"PAUSED"}
        b = {p: make_records(5, partition=p, tag=f"b{p}") for p in (0, 1)}
        produce_records(east.bootstrap, topic, b[0] + b[1])
        run.quiet(name)
        assert end_offsets(west.bootstrap, remote) == {0: 15, 1: 15}  # nothing while paused
        assert http.put("/connectors/mirror/resume").status_code == 202
        _settled(west, remote, {0: 20, 1: 20})

        r = http.get("/connectors/mirror/offsets")
        wait_until(lambda: sorted(o["offset"]["offset"] for o in http.get(
            "/connectors/mirror/offsets").json()["offsets"]) == [19, 19], 30, 0.2, "positions committed")
        assert http.request("DELETE", "/connectors/mirror/offsets").status_code == 400  # not STOPPED
        assert http.put("/connectors/mirror/stop").status_code == 204
        assert http.get("/connectors/mirror/status").json()["connector"]["state"] == "STOPPED"
        assert not run.leases.writing(name)
        r = http.request("DELETE", "/connectors/mirror/offsets")
        assert r.status_code == 200, r.text
        assert http.get("/connectors/mirror/offsets").json() == {"offsets": []}
        c = {p: make_records(5, partition=p, tag=f"c{p}") for p in (0, 1)}
        produce_records(east.bootstrap, topic, c[0] + c[1])

        assert http.put("/connectors/mirror/resume").status_code == 202
        _settled(west, remote, {0: 45, 1: 45})  # forgotten: mirrored as never before
    for p in (0, 1):  # every record accounted for: once before the forget, once after
        once = a[p] + b[p]
        assert _target(west, remote, p) == _content(once + once + c[p])


def test_rounds_mode_stops_moves_and_resumes_a_flow_too(
    east: KafkaCluster, west: KafkaCluster, spark: Any
) -> None:
    """``--spark-mode rounds``: a stop waits for the round under way, no round is planned for the
    stopped flow, and the resumed flow's rounds start from the moved position."""
    alias = unique("spkr")
    topic = create_topic(east.bootstrap, unique("rounds"), partitions=2)
    remote, path = f"{alias}.{topic}", f"/flows/{alias}/west"
    a = {p: make_records(20, partition=p, tag=f"a{p}") for p in (0, 1)}
    produce_records(east.bootstrap, topic, a[0] + a[1])
    run = SparkRest(spark, east, west, alias, mode="rounds")
    with run as http:
        r = http.post("/flows", json={"source": alias, "target": "west", "topics": [topic],
                                     "settings": {"tasks.max": 2}})
        assert r.status_code == 201, r.text
        _settled(west, remote, {0: 20, 1: 20})
        assert http.post(f"{path}/stop").json()["state"] == "STOPPED"
        b = {p: make_records(10, partition=p, tag=f"b{p}") for p in (0, 1)}
        produce_records(east.bootstrap, topic, b[0] + b[1])
        rounds = run.worker.rounds
        r = http.patch(f"{path}/offsets", json={"offsets": [{"topic": topic, "partition": 0,
                                                              "offset": "earliest"}]})
        assert r.status_code == 200, r.text
        assert run.worker.rounds == rounds and end_offsets(west.bootstrap, remote) == {0: 20, 1: 20}
        assert http.post(f"{path}/resume").json()["state"] == "RUNNING"
        _settled(west, remote, {0: 50, 1: 30})
    assert _target(west, remote, 0) == _content(a[0] + a[0] + b[0])
    assert _target(west, remote, 1) == _content(a[1] + b[1])
