"""The Spark runtime (embedded local mode) against real brokers: the same task code, in leases
(continuous, the default) and in rounds (bounded backfills).

One SparkSession for this module and test_spark_halting (``local_spark`` in conftest: Spark starts
slowly); each test runs its own SparkWorker on it in a thread, as ``mm2py run --runtime spark``
would.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest
from confluent_kafka import Producer

from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.rest_api.flows.bodies import FlowStatus
from mm2py.runtime.spark.driver.lease_scheduler import LeaseSettings
from mm2py.runtime.spark.driver.worker import SparkWorker
from mm2py.stores.positions import PositionStore
from tests.support.brokers import (
    by_partition,
    create_topic,
    end_offsets,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    read_syncs,
    topic_names,
    total,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark(local_spark: Any) -> Any:
    return local_spark


class SparkRun:
    """A SparkWorker on the module's session, run in a thread until the ``with`` block ends."""

    def __init__(self, config: Any, spark: Any, mode: str = "leases", lease_seconds: float = 60,
                 renew_in_place: bool = False) -> None:
        self.worker = SparkWorker(config, spark=spark, round_seconds=5, idle_seconds=0.2, commit_interval=0.5,
                                  mode=mode, leases=LeaseSettings(lease_seconds, commit_interval=0.5,
                                                                  renew_in_place=renew_in_place))
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            self.worker.run_blocking(self.stop, status_interval=3600)
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> SparkRun:
        self.thread.start()
        wait_until(lambda: self.error is not None or all(
            f.state == "RUNNING" for f in self.worker.flows.values()), 60, 0.1, "the flows to start")
        if self.error is not None:
            raise self.error
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the Spark worker did not stop"
        if self.error is not None:
            raise self.error

    @property
    def flow(self) -> Any:
        return self.worker.flows["east->west"]


def _config(east: KafkaCluster, west: KafkaCluster, topics: str) -> Any:
    return mirror_config({"east": east.bootstrap, "west": west.bootstrap}, {"east->west": {
        "topics": topics, "tasks.max": 2, "refresh.topics.interval.seconds": 1, "offset.lag.max": 50,
    }})


def _produce(bootstrap: str, topic: str, plan: dict[int, list[str]], n: int, tag: str) -> None:
    """``n`` records per (partition, codec) of ``plan``, each codec in its own batches."""
    for partition, codecs in plan.items():
        for codec in codecs:
            produce_records(bootstrap, topic, make_records(n, partition=partition, tag=f"{tag}-{codec}"),
                            compression=codec)


def _same(east: KafkaCluster, west: KafkaCluster, topic: str) -> bool:
    target = f"east.{topic}"
    if target not in topic_names(west.bootstrap):
        return False
    return end_offsets(west.bootstrap, target) == end_offsets(east.bootstrap, topic)


def _assert_identical(east: KafkaCluster, west: KafkaCluster, topic: str) -> int:
    src = read_all(east.bootstrap, topic)
    dst = read_all(west.bootstrap, f"east.{topic}")
    assert by_partition(dst) == by_partition(src)  # same records, same order, nothing twice
    return len(src)


@pytest.mark.parametrize("mode", ["leases", "rounds"])
def test_spark_mirrors_exactly_resumes_exactly_and_picks_up_new_topics(
    east: KafkaCluster, west: KafkaCluster, spark: Any, mode: str
) -> None:
    prefix = unique("spk")
    a = create_topic(east.bootstrap, f"{prefix}-a", partitions=2)
    b = create_topic(east.bootstrap, f"{prefix}-b", partitions=2)
    _produce(east.bootstrap, a, {0: ["lz4", "zstd"], 1: ["zstd", "none"]}, 400, "one")
    _produce(east.bootstrap, b, {0: ["gzip", "snappy"], 1: ["snappy", "lz4"]}, 400, "one")
    config = _config(east, west, f"{prefix}-.*")

    def counted(run: SparkRun) -> int:
        return sum(t["records"] for t in run.flow.status()["tasks"])

    with SparkRun(config, spark, mode) as run:
        wait_until(lambda: _same(east, west, a) and _same(east, west, b), 60, 0.3, "the first backlog")
        # the target may be complete a moment before the round's result reached the driver
        wait_until(lambda: counted(run) >= 3200, 30, 0.1, "the round's result")
        assert {t["state"] for t in run.flow.status()["tasks"]} == {"RUNNING"}
    status = run.flow.status()  # final: the worker has stopped
    assert _assert_identical(east, west, a) + _assert_identical(east, west, b) == 3200
    assert run.flow.state == "STOPPED"
    FlowStatus.model_validate(status)  # what the REST API shows for a flow of either runtime
    assert status["checkpoints"] is not None  # MM2's checkpoint connector runs on the driver
    assert status["topics"] == {a: f"east.{a}", b: f"east.{b}"}
    assert len(status["tasks"]) == 2 and all(t["state"] == "STOPPED" for t in status["tasks"])
    assert sorted(p for t in status["tasks"] for p in t["partitions"]) == [
        f"{a}-0", f"{a}-1", f"{b}-0", f"{b}-1"]
    assert sum(t["records"] for t in status["tasks"]) == 3200
    assert set(status["tasks"][0]) == {"id", "state", "trace", "partitions", "batches", "records", "bytes",
                                       "rebuilt_batches", "split_batches", "syncs", "lag", "restarts",
                                       "verified_batches", "alarms", "recent_alarms", "held_partitions",
                                       "refused_partitions", "waiting_for_target"}
    # the leases' and rounds' acknowledgements were verified where the last batch ended, no alarm
    assert sum(t["verified_batches"] for t in status["tasks"]) > 0
    assert all(t["alarms"] == {} and t["recent_alarms"] == [] for t in status["tasks"])

    # offset syncs for every partition, in MM2's format; progress committed at the source ends
    synced = {s.topic_partition for s in read_syncs(east.bootstrap, "mm2-offset-syncs.west.internal")}
    want = {TopicPartition(t, p) for t in (a, b) for p in (0, 1)}
    assert want <= synced
    committed = PositionStore(ClusterAdmin("west", west.bootstrap), "east").load()
    for t in (a, b):
        target_ends = end_offsets(west.bootstrap, f"east.{t}")
        for p, end in end_offsets(east.bootstrap, t).items():
            assert committed[TopicPartition(t, p)][:2] == (end, target_ends[p])

    # produced while nothing runs: a second run continues where the first one stopped
    _produce(east.bootstrap, a, {0: ["gzip"], 1: ["lz4"]}, 150, "two")
    _produce(east.bootstrap, b, {0: ["zstd"], 1: ["none"]}, 150, "two")
    with SparkRun(config, spark, mode) as run:
        wait_until(lambda: _same(east, west, a) and _same(east, west, b), 60, 0.3, "the second backlog")
        # a topic created while the flow runs is found by the next refresh and mirrored
        c = create_topic(east.bootstrap, f"{prefix}-c", partitions=2)
        _produce(east.bootstrap, c, {0: ["zstd"], 1: ["gzip"]}, 200, "new")
        wait_until(lambda: _same(east, west, c), 60, 0.3, "the new topic")
    status = run.flow.status()
    assert _assert_identical(east, west, a) + _assert_identical(east, west, b) == 3800
    assert _assert_identical(east, west, c) == 400
    assert sum(t["records"] for t in status["tasks"]) == 600 + 400  # nothing copied twice
    assert c in status["topics"]


def test_a_failed_round_is_reported_and_run_again_from_the_committed_progress(
    east: KafkaCluster, west: KafkaCluster, spark: Any
) -> None:
    topic = create_topic(east.bootstrap, unique("spkfail"), partitions=2)
    _produce(east.bootstrap, topic, {0: ["lz4"], 1: ["zstd"]}, 300, "before")
    # short leases: the next lease of each task starts soon with the flow's new settings
    with SparkRun(_config(east, west, topic), spark, lease_seconds=2, renew_in_place=True) as run:
        wait_until(lambda: _same(east, west, topic), 60, 0.3, "the first backlog")
        good = run.flow.flow
        # executors now get a task they cannot build (as if a client setting were wrong there)
        bad = {"consumer": {"isolation.level": "bogus"}}
        run.flow.flow = good.model_copy(update={"client_overrides": bad})
        _produce(east.bootstrap, topic, {0: ["gzip"], 1: ["snappy"]}, 300, "during")

        def failed() -> bool:
            return any(t["state"] == "FAILED" for t in run.flow.status()["tasks"])

        wait_until(failed, 30, 0.1, "a failed round")
        traces = [t["trace"] for t in run.flow.status()["tasks"] if t["state"] == "FAILED"]
        assert all("isolation.level" in str(trace) for trace in traces)
        assert any(t.failed_rounds for t in run.flow.tasks.values())
        run.flow.flow = good
        wait_until(lambda: _same(east, west, topic), 60, 0.3, "the rounds after the failure")
        wait_until(lambda: all(t["state"] == "RUNNING" for t in run.flow.status()["tasks"]), 30, 0.1,
                   "the tasks to recover")
    assert _assert_identical(east, west, topic) == 1200


def _python_workers() -> list[int]:
    """pyspark's Python worker processes under this process (children of its pyspark daemon)."""
    from pathlib import Path

    info: dict[int, tuple[int, str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        info[int(stat.parent.name)] = (ppid, cmd)

    def mine(pid: int) -> bool:
        while pid in info and pid > 1:
            if pid == os.getpid():
                return True
            pid = info[pid][0]
        return False

    daemons = {p for p, (_, cmd) in info.items() if "spark.daemon" in cmd and mine(p)}  # pyspark's or mm2py's
    return [p for p, (ppid, _) in info.items() if ppid in daemons]


def test_an_executor_killed_mid_round_fails_the_job_and_the_next_round_resumes_exactly(
    east: KafkaCluster, west: KafkaCluster, spark: Any
) -> None:
    topic = create_topic(east.bootstrap, unique("spkkill"), partitions=2)
    for p, codec in ((0, "lz4"), (1, "zstd")):  # batches of 10 records
        produce_records(east.bootstrap, topic, make_records(3000, partition=p, tag=f"k{p}"),
                        compression=codec, linger_ms=0, extra={"batch.num.messages": 10})
    sent = total(east.bootstrap, topic)
    # one batch per fetch: a round takes seconds, long enough to be killed in the middle
    one_batch = {"east.consumer.fetch.max.bytes": "1", "east.consumer.max.partition.fetch.bytes": "1"}
    config = mirror_config({"east": east.bootstrap, "west": west.bootstrap},
                           {"east->west": {"topics": topic, "tasks.max": 1}}, **one_batch)

    def on_target() -> int:
        return total(west.bootstrap, f"east.{topic}")

    with SparkRun(config, spark) as run:
        wait_until(lambda: on_target() >= 200, 60, 0.05, "the first round to be under way")
        killed = _python_workers()
        assert killed and on_target() < sent, "the round ended before it could be killed: make it longer"
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: run.worker.failed_jobs >= 1, 30, 0.1, "the failed Spark job to be reported")
        task = run.flow.tasks[0]
        assert task.failed_rounds >= 1 and "crashed" in str(task.trace)
        wait_until(lambda: on_target() >= sent, 90, 0.3, "the rounds after the kill")
        wait_until(lambda: run.flow.status()["tasks"][0]["state"] == "RUNNING", 30, 0.1, "recovery")
    src = read_all(east.bootstrap, topic)
    # nothing missing, nothing twice: the retried round resumed from the seeded or committed
    # position and skipped what the killed round had already delivered
    assert by_partition(read_all(west.bootstrap, f"east.{topic}")) == by_partition(src)
    assert len(src) == sent == 6000


def test_rest_api_steers_the_spark_runtime(east: KafkaCluster, west: KafkaCluster, spark: Any) -> None:
    """Flows created, widened and removed over HTTP while the Spark worker runs rounds; a named
    flow of the same pair beside the unnamed one, with positions of its own."""
    import asyncio

    import httpx

    from mm2py.rest_api.server import RestServer

    prefix = unique("spk-rest")
    a = create_topic(east.bootstrap, f"{prefix}-a", partitions=2)
    b = create_topic(east.bootstrap, f"{prefix}-b", partitions=1)
    produce_records(east.bootstrap, a, make_records(300, tag="a"), compression="zstd")
    produce_records(east.bootstrap, b, make_records(200, tag="b"), compression="lz4")
    c = create_topic(east.bootstrap, f"{prefix}-c", partitions=2)
    produce_records(east.bootstrap, c, make_records(150, tag="c"), compression="lz4")
    config = mirror_config({"east": east.bootstrap, "west": west.bootstrap}, {})
    worker = SparkWorker(config, spark=spark, round_seconds=5, idle_seconds=0.2, commit_interval=0.5)
    assert worker.flows == {}
    halt = threading.Event()
    ready = threading.Event()
    url: list[str] = []
    errors: list[BaseException] = []

    async def serve() -> None:
        stop = asyncio.Event()
        server = RestServer(worker, "127.0.0.1", 0)
        await server.start()
        url.append(server.url)
        running = asyncio.create_task(worker.run(stop, status_interval=3600))
        ready.set()
        while not halt.is_set() and not running.done():
            await asyncio.sleep(0.1)
        stop.set()
        await running
        await server.stop()

    def main() -> None:
        try:
            asyncio.run(serve())
        except BaseException as exc:
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        assert ready.wait(60) and not errors, errors
        with httpx.Client(base_url=url[0], timeout=120) as http:
            r = http.post("/flows", json={"source": "east", "target": "west", "topics": [a],
                                         "settings": {"tasks.max": 2}})
            assert r.status_code == 201, r.text
            assert set(r.json()["topics"]) == {a}
            wait_until(lambda: _same(east, west, a), 60, 0.5, "created flow mirrored by Spark rounds")
            assert f"east.{b}" not in topic_names(west.bootstrap)
            r = http.patch("/flows/east/west", json={"topics": [a, b]})
            assert r.status_code == 200 and set(r.json()["topics"]) == {a, b}, r.text
            wait_until(lambda: _same(east, west, b), 60, 0.5, "newly allowed topic mirrored")
            # the leases' reports reach the driver within a report interval of the records
            wait_until(lambda: sum(t["records"] for t in http.get("/flows/east/west").json()["tasks"])
                       >= 500, 10, 0.2, "the leases' reports")
            status = http.get("/flows/east/west").json()
            assert sum(t["records"] for t in status["tasks"]) == 500

            def host_fetches() -> float:  # the mirror host's own Fetch requests to east, per host
                return sum(float(line.rsplit(" ", 1)[1]) for line in http.get("/metrics").text.splitlines()
                           if line.startswith("mm2py_host_requests_total{")
                           and 'cluster="east"' in line and 'api="Fetch"' in line)

            # every stats interval (1 s) the host says its figures: it fetched 500 records
            wait_until(lambda: host_fetches() > 0, 30, 0.2, "the mirror host's Fetch requests on /metrics")
            r = http.post("/flows", json={"source": "east", "target": "west", "name": "spark-named",
                                         "topics": [c]})
            assert r.status_code == 201 and r.json()["name"] == "spark-named", r.text
            wait_until(lambda: _same(east, west, c), 60, 0.5, "the named flow mirrored by Spark leases")

            def positions() -> dict[str, int]:  # the named flow's committed positions, per topic
                rows = http.get("/flows/spark-named/offsets").json()["offsets"]
                out: dict[str, int] = {}
                for o in rows:
                    out[o["topic"]] = out.get(o["topic"], 0) + o["position"]
                return out

            wait_until(lambda: positions() == {c: 150}, 30, 0.2, "the named flow's own positions committed")
            assert http.get("/flows/east/west").json()["name"] == "east->west"  # the unnamed one
            assert http.delete("/flows/spark-named").status_code == 204
            assert http.delete("/flows/east/west").status_code == 204
            assert http.get("/flows").json() == {"flows": []}
    finally:
        halt.set()
        thread.join(60)
    assert not errors, errors
    assert _assert_identical(east, west, a) == 300 and _assert_identical(east, west, b) == 200
    assert _assert_identical(east, west, c) == 150


def test_leases_hand_over_under_live_traffic_exactly_with_positions_carried_over(
    east: KafkaCluster, west: KafkaCluster, spark: Any
) -> None:
    """One-second leases while records keep arriving: each successor takes over from the position
    its predecessor released (no progress-topic read), and the target gets every record once."""

    topic = create_topic(east.bootstrap, unique("spklive"), partitions=2)
    enough, batches = threading.Event(), []

    def live() -> None:  # every 0.2 s a small lz4 batch to each partition, until enough hand-overs
        producer = Producer({"bootstrap.servers": east.bootstrap, "compression.type": "lz4", "linger.ms": 0,
                             "enable.idempotence": True, "acks": "all"})
        for i in range(1500):  # at most 5 minutes
            for p in (0, 1):
                for r in make_records(5, partition=p, tag=f"live{i}"):
                    producer.produce(topic, r.value, r.key, partition=p, timestamp=r.timestamp)
            assert producer.flush(30) == 0
            batches.append(i)
            if enough.wait(0.2):
                break

    # renewed on their one host (local[N]) every second: hand-overs inside the host
    with SparkRun(_config(east, west, topic), spark, lease_seconds=1, renew_in_place=True) as run:
        producer = threading.Thread(target=live, daemon=True)
        producer.start()
        try:
            # executor figures reach the driver while the first leases still run
            wait_until(lambda: sum(t["records"] for t in run.flow.status()["tasks"]) > 0, 60, 0.1,
                       "the first lease reports")
            leases = run.worker.leases
            assert leases is not None
            # several successive leases per task, hand-overs with the predecessor's positions, all
            # while records arrive (a busy machine starts Spark jobs slowly: traffic lasts until then)
            wait_until(lambda: leases.started >= 6 and leases.table.carried_over >= 4, 180, 0.2,
                       "six leases and four positions carried over")
        finally:
            enough.set()
            producer.join(60)
        sent = 10 * len(batches)
        wait_until(lambda: _same(east, west, topic), 60, 0.2, "the live traffic mirrored")
        wait_until(lambda: sum(t["records"] for t in run.flow.status()["tasks"]) >= sent, 10, 0.2,
                   "the leases' reports")
        assert sum(t["records"] for t in run.flow.status()["tasks"]) == sent  # nothing copied twice
    assert _assert_identical(east, west, topic) == sent
