"""The Spark runtime on a real Spark standalone cluster (a master and two workers on loopback).

Every test runs the driver as ``mm2py run --runtime spark --spark-master spark://...`` in a
subprocess, as an operator would, and judges it only by what reaches the clusters: every record on
the target, in order per partition, nothing twice; offset syncs, checkpoints and target group
offsets that translate exactly. One Spark cluster serves the module; each test starts with both
workers alive. The tests hold for any way the runtime schedules its Spark jobs (rounds or leases)."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.mm2_records import Checkpoint
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from tests.support.brokers import (
    config_file,
    consume_and_commit,
    create_topic,
    end_offsets,
    make_records,
    produce_records,
    read_all,
    read_syncs,
    topic_names,
    unique,
    wait_until,
)
from tests.support.live_producer import LiveProducer
from tests.support.spark_cluster import SparkStandaloneCluster, driver_java_options, executor_java_options

#: pytest-timeout's guard against a hang, not a wait: every wait here is paced by the cluster's own
#: measured start (``cluster.paced``), and on a loaded host (two busy loops and the demo's clusters
#: beside the suite) the worker-kill test took 238 s and the first test's teardown stopped the
#: cluster past the default 300 s, while nothing hung
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandaloneCluster]:
    # three cores a worker: the four leases of two flows of two tasks each, and room for two
    # successors at a time; with one worker lost, a lease that was on it can still start at once
    with SparkStandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), cores=3) as cluster:
        yield cluster


@pytest.fixture
def cluster(spark_cluster: SparkStandaloneCluster) -> Iterator[SparkStandaloneCluster]:
    """The module's cluster with both workers alive and no application running."""
    spark_cluster.restore()
    wait_until(lambda: not spark_cluster.active_apps(), spark_cluster.paced(30), 0.2,
               "the previous test's application to end")
    yield spark_cluster


class Driver:
    """``mm2py run --runtime spark`` against the standalone master, in its own process group (the
    Python process and the Spark driver JVM it starts), logging to a file."""

    def __init__(self, config: Path, master: str, log: Path, *extra: str) -> None:
        self.log = log
        self.cmd = [
            sys.executable, "-m", "mm2py.cli", "run", "-c", str(config), "--runtime", "spark",
            "--spark-master", master, "--spark-round-seconds", "5", "--commit-interval", "0.5",
            # quick JVM start-up for the driver and the executors (the machine is small)
            "--spark-conf", f"spark.driver.defaultJavaOptions={driver_java_options()}",
            "--spark-conf", f"spark.executor.defaultJavaOptions={executor_java_options()}", *extra,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Driver:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": _pythonpath()},
                start_new_session=True,
            )
        return self

    def kill(self) -> None:
        """SIGKILL the Python driver and its Spark JVM at once (a crashed driver host)."""
        assert self.proc is not None and self.proc.poll() is None, self.text()[-3000:]
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def kill_python(self) -> None:
        """SIGKILL the Python driver only: its Spark JVM and executors are orphaned, and notice
        (the JVM when its standard input closes, the executors when the lease server is gone)."""
        assert self.proc is not None and self.proc.poll() is None, self.text()[-3000:]
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM; the driver must stop cleanly (progress committed, exit code 0)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(60)
        finally:
            self.reap()
        assert code == 0 and "stopped; progress committed" in self.text(), self.text()[-3000:]

    def reap(self) -> None:
        """A driver still running is killed (called on every way out). Its group is signalled only
        while the driver is not reaped yet: until then its pid cannot belong to anyone else."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_app(self, cluster: SparkStandaloneCluster, before: str | None = None) -> str:
        """Until the driver's application runs on the standalone master; returns its id (the one
        application there, other than ``before``)."""
        apps: list[str] = []

        def registered() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.text()[-3000:]
            apps[:] = [str(a["id"]) for a in cluster.active_apps() if a["id"] != before]
            return bool(apps)

        wait_until(registered, cluster.paced(90), 0.2,
                   f"the driver's application at {cluster.master_url} (log {self.log})")
        assert len(apps) == 1, f"one application expected at the master, not {apps}"
        return apps[0]


def _pythonpath() -> str:
    """This checkout first: the driver (and through it the executors) import the code under test."""
    return os.pathsep.join(dict.fromkeys([str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(
        os.pathsep))]))


#: a flow's checkpoint and group-offset sync jobs every second
FAST_GROUPS = {
    "emit.checkpoints.interval.seconds": 1,
    "sync.group.offsets.enabled": True,
    "sync.group.offsets.interval.seconds": 1,
    "refresh.groups.interval.seconds": 1,
}


def _config(tmp_path: Path, east: KafkaCluster, west: KafkaCluster, topic: str,
            flow: dict[str, object] | None = None, **settings: str) -> Path:
    return config_file(tmp_path / "mm2.json", {"east": east.bootstrap, "west": west.bootstrap},
                       {"east->west": {"topics": topic, "tasks.max": 2, **(flow or {})}}, **settings)


def _target_ends(west: KafkaCluster, topic: str) -> dict[int, int]:
    if f"east.{topic}" not in topic_names(west.bootstrap):
        return {}
    return end_offsets(west.bootstrap, f"east.{topic}")


def _wait_mirrored(east: KafkaCluster, west: KafkaCluster, topic: str, timeout: float, what: str,
                   ends: dict[int, int] | None = None) -> None:
    """Until the target partitions end at ``ends`` (default: where the source partitions end)."""
    source = ends or end_offsets(east.bootstrap, topic)

    def reached() -> bool:
        target = _target_ends(west, topic)
        over = {p: end for p, end in target.items() if end > source.get(p, 0)}
        assert not over, f"{what}: target east.{topic} ends {target} past the source's {source} (duplicates)"
        return target == source

    wait_until(reached, timeout, 0.3, f"{what}: target east.{topic} to reach the source ends {source}")


def _assert_mirrored_exactly(east: KafkaCluster, west: KafkaCluster, topic: str) -> int:
    """The target holds each source record once, in the source's order per partition (same key,
    value, headers, timestamp); returns how many records there are."""
    source = read_all(east.bootstrap, topic)
    target = read_all(west.bootstrap, f"east.{topic}")
    for p in sorted({r.partition for r in source} | {r.partition for r in target}):
        want = [r.content() for r in source if r.partition == p]
        got = [r.content() for r in target if r.partition == p]
        if got != want:
            missing = sum((Counter(want) - Counter(got)).values())
            twice = sum((Counter(got) - Counter(want)).values())
            first = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
                         min(len(want), len(got)))
            pytest.fail(f"partition {p}: source {len(want)} records, target {len(got)}; {missing} missing, "
                        f"{twice} extra (duplicates), first difference at index {first}")
    return len(source)


def _abort_a_transaction(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    """``records`` aborted records and an abort marker at the head of every partition: the source
    offsets of what follows are ahead of where it lands on the target."""
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx"), "linger.ms": 5})
    tx.init_transactions(30)
    tx.begin_transaction()
    for p in range(partitions):
        for i in range(records):
            tx.produce(topic, f"aborted-{p}-{i}".encode(), partition=p)
    tx.flush(30)
    tx.abort_transaction(30)


def _assert_offsets_translate(east: KafkaCluster, west: KafkaCluster, topic: str) -> None:
    """Every offset sync of ``topic`` maps a source record to the same record on the target."""
    source = {(r.partition, r.offset): r.content() for r in read_all(east.bootstrap, topic)}
    target = {(r.partition, r.offset): r.content() for r in read_all(west.bootstrap, f"east.{topic}")}
    syncs = [s for s in read_syncs(east.bootstrap, "mm2-offset-syncs.west.internal")
             if s.topic_partition.topic == topic]
    assert {s.topic_partition.partition for s in syncs} == {0, 1}, syncs
    for s in syncs:
        p = s.topic_partition.partition
        assert source.get((p, s.upstream_offset)) is not None, f"sync {s} names no source record"
        assert target.get((p, s.downstream_offset)) == source[(p, s.upstream_offset)], f"sync {s} is wrong"


def _where_landed(east: KafkaCluster, west: KafkaCluster, topic: str, at: dict[int, int]) -> dict[int, int]:
    """The target offset of the source record at each ``at[p]`` (found by its content)."""
    source = {(r.partition, r.offset): r.content() for r in read_all(east.bootstrap, topic)}
    target = {(r.partition, r.content()): r.offset for r in read_all(west.bootstrap, f"east.{topic}")}
    return {p: target[(p, source[(p, u)])] for p, u in at.items()}


def _target_group(west: KafkaCluster, group: str) -> dict[int, int]:
    offsets = ClusterAdmin("west", west.bootstrap).group_offsets([group]).get(group, {})
    return {tp.partition: o.offset for tp, o in offsets.items()}


def _latest_checkpoints(west: KafkaCluster, group: str) -> dict[TopicPartition, Checkpoint]:
    records = read_all(west.bootstrap, "east.checkpoints.internal")
    checkpoints = (Checkpoint.from_record(r.key, r.value) for r in records)
    return {cp.topic_partition: cp for cp in checkpoints if cp.group == group}


def _executor_pythonpaths(cluster: SparkStandaloneCluster, app_id: str) -> list[list[str]]:
    """The PYTHONPATH of each of ``app_id``'s Python daemons (the parents of its Python workers)."""
    out = []
    for pid in cluster.app_processes(app_id):
        try:
            if b"spark.daemon" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            env = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text().split("\0")
                       if "=" in item)
        except OSError:
            continue
        out.append(env.get("PYTHONPATH", "").split(os.pathsep))
    return out


def _task_log(cluster: SparkStandaloneCluster, app_id: str, worker: str) -> tuple[int, int]:
    """How many Spark tasks ``app_id``'s executors on ``worker`` started and finished so far."""
    text = "".join(p.read_text(errors="replace") for p in cluster.executor_logs(app_id)[worker])
    return text.count("Executor: Running task"), text.count("Executor: Finished task")


_PLACED = re.compile(r" lease (\S+) started for \d+ partitions on mirror host \S+ \(\S+:(\d+)\)")


def _lease_holders(log: Path) -> dict[str, int]:
    """The leases the driver placed on mirror hosts and has not given up: lease id -> the pid of
    the host's process (the driver's INFO lines)."""
    text = log.read_text(errors="replace")
    placed = {m[1]: int(m[2]) for m in _PLACED.finditer(text)}
    return {lease: pid for lease, pid in placed.items() if f" lease {lease} given up (" not in text}


def _copying_on(cluster: SparkStandaloneCluster, app_id: str, west: KafkaCluster, topic: str,
                driver_log: Path) -> str | None:
    """A worker whose mirror host holds a lease while every target partition grows through a short
    window (copying, not starting up, not done), or None. The driver places the leases: both may
    be on one host, and a host may hold none."""
    before = _target_ends(west, topic)
    time.sleep(0.4)
    after = _target_ends(west, topic)
    if len(after) < 2 or not all(end > before.get(p, 0) for p, end in after.items()):
        return None
    holders = [cluster.worker_running(app_id, pid) for pid in _lease_holders(driver_log).values()]
    return next((w for w in holders if w is not None), None)


#: records per partition of the worker-kill test's backlog
BACKLOG = 5000


FENCE = 2.0  # --spark-fence-seconds of the worker-loss test


def test_a_worker_killed_mid_copy_loses_nothing_and_duplicates_nothing(
    east: KafkaCluster, west: KafkaCluster, cluster: SparkStandaloneCluster, tmp_path: Path
) -> None:
    topic = create_topic(east.bootstrap, unique("sa-worker"), partitions=2)
    # a backlog of small batches, fetched one batch at a time: copying it takes seconds
    for p, codec in ((0, "lz4"), (1, "zstd")):
        produce_records(east.bootstrap, topic, make_records(BACKLOG, partition=p, tag=f"p{p}"),
                        compression=codec, linger_ms=0, extra={"batch.num.messages": 10})
    config = _config(tmp_path, east, west, topic, **{
        "east.consumer.fetch.max.bytes": "1", "east.consumer.max.partition.fetch.bytes": "1"})
    driver = Driver(config, cluster.master_url, tmp_path / "driver.log", "--spark-fence-seconds", str(FENCE))
    try:
        app = driver.start().wait_app(cluster)
        copying: list[str] = []

        def copying_on_a_worker() -> bool:
            copying[:] = filter(None, [_copying_on(cluster, app, west, topic, driver.log)])
            return bool(copying)

        try:  # the executors' JVMs and Python daemons start first: a minute on a loaded 2-core host
            wait_until(copying_on_a_worker, cluster.paced(180), 0.05,
                       "both partitions copied, a lease on a worker's mirror host")
        except AssertionError as exc:
            tasks = {w.name: _task_log(cluster, app, w.name) for w in cluster.workers}
            raise AssertionError(f"{exc}: Spark tasks (started, finished) {tasks}, target ends "
                                 f"{_target_ends(west, topic)}, the driver's log ends with "
                                 f"{driver.log.read_text(errors='replace')[-3000:]}") from None
        victim = copying[0]
        survivor = next(w.name for w in cluster.workers if w.name != victim)
        killed = cluster.kill_worker(victim)
        at_kill, killed_at = _target_ends(west, topic), datetime.now()
        assert sum(at_kill.values()) < 2 * BACKLOG, f"the backlog was copied before the kill: {at_kill}"
        source = end_offsets(east.bootstrap, topic)

        def every_partition_moving() -> bool:
            ends = _target_ends(west, topic)
            return all(ends[p] > at_kill[p] or ends[p] == source[p] for p in source)

        # the lost leases are given up within two fence intervals of their last report (their
        # socket closed with the executor), and new leases started for their partitions at once
        wait_until(lambda: _given_up(driver.log), cluster.paced(30), 0.1, "the lost leases given up")
        late = max((at - killed_at).total_seconds() for at in _given_up(driver.log))
        # the guarantee is 2 x fence after its last report; the slack is the driver's and this
        # test's own polling, at this host's pace
        assert late < 2 * FENCE + cluster.paced(3), f"a lost lease was given up {late:.1f} s after the kill"
        # moving again once Spark placed them: on a worker that never ran a Python task, its
        # Python daemon starts first (seconds; 20 s on a 2-core machine under a load of 15)
        wait_until(every_partition_moving, cluster.paced(120), 0.1, "every partition moving after the kill")
        assert len(killed) >= 4, f"worker, executor, Python daemon and worker expected: {killed}"
        assert not any(Path(f"/proc/{pid}").exists() and _not_zombie(pid) for pid in killed)
        wait_until(lambda: cluster.alive_workers() == [survivor], cluster.paced(30), 0.2,
                   f"the master to see {victim} lost")
        # the work of the killed worker re-runs on the other, from the committed progress
        _wait_mirrored(east, west, topic, cluster.paced(240), "the rest after the kill")  # a busy CI host
        assert cluster.alive_workers() == [survivor]
        driver.stop()
    finally:
        driver.reap()
    assert _assert_mirrored_exactly(east, west, topic) == 2 * BACKLOG


def _given_up(log: Path) -> list[datetime]:
    """When the driver gave up leases (its log's INFO lines), in its clock."""
    return [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            for line in log.read_text(errors="replace").splitlines() if " given up (" in line]


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_flows_on_the_standalone_cluster_are_steered_over_rest_and_survive_driver_kills_exactly(
    east: KafkaCluster, west: KafkaCluster, cluster: SparkStandaloneCluster, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two flows, three drivers (a Spark application starts slowly here, so one story serves all),
    leases of four seconds (hand-overs under way all along).

    ``east->west``: a backlog behind an aborted transaction, zstd and lz4, mirrored exactly; a
    group's offsets translated, checkpointed and committed to the target group; the executors
    import this checkout and ran the leases. Beside it, a topic under live traffic all through.

    ``<alias>->west`` (issue 22, a source alias of its own so the forget touches no other flow's
    positions): pause while the source grows, resume (caught up exactly); stop, move one partition
    to earliest, resume (it is mirrored again from its start, the others once); stop, forget every
    position, resume (all mirrored again).

    Then the driver is SIGKILLed twice under the live traffic: first its Python process alone (the
    Spark JVM and the executors orphaned), then its whole process group (a crashed host), the
    second 1,000 records later into its driver's leases than the first. With no driver running,
    ``mm2py flow-offsets`` reads and moves a position the last driver starts from. Each new driver
    resumes from the committed progress and the target's tail: every record once, in order."""
    import httpx

    topic = create_topic(east.bootstrap, unique("sa"), partitions=2)
    _abort_a_transaction(east.bootstrap, topic, 2, 40)
    for p, codec in ((0, "zstd"), (1, "lz4")):
        produce_records(east.bootstrap, topic, make_records(1500, partition=p, tag=f"p{p}"),
                        compression=codec)
    group = unique("g")
    committed = consume_and_commit(east.bootstrap, group, topic, {0: 500, 1: 1100}, poll_timeout=10)
    live_topic = create_topic(east.bootstrap, unique("sa-live"), partitions=2)

    alias = unique("sah")
    halted = create_topic(east.bootstrap, unique("sahalt"), partitions=3)
    remote, path = f"{alias}.{halted}", f"/flows/{alias}/west"
    clusters = {"east": east.bootstrap, alias: east.bootstrap, "west": west.bootstrap}
    config = config_file(tmp_path / "mm2.json", clusters, {
        "east->west": {"topics": f"{topic}|{live_topic}", "tasks.max": 2, "groups": group, **FAST_GROUPS},
        f"{alias}->west": {"topics": halted, "tasks.max": 2, "emit.checkpoints.enabled": False}})
    port = _free_port()
    leases = ("--spark-lease-seconds", "4")
    drivers = [Driver(config, cluster.master_url, tmp_path / f"driver-{i}.log", *leases,
                      *(("--rest-port", str(port)) if i == 1 else ())) for i in (1, 2, 3)]
    batches: list[dict[int, list[object]]] = []

    def produce(n: int, tag: str) -> None:
        batch = {p: [r.content() for r in make_records(n, partition=p, tag=f"{tag}{p}")] for p in range(3)}
        for p in range(3):
            produce_records(east.bootstrap, halted, make_records(n, partition=p, tag=f"{tag}{p}"))
        batches.append(batch)

    def settled(counts: dict[int, int]) -> None:
        wait_until(lambda: end_offsets(west.bootstrap, remote) == counts, cluster.paced(120), 0.3,
                   f"{remote} at {counts}")

    def live_mirrored() -> int:
        return sum(_target_ends(west, live_topic).values())

    try:
        with LiveProducer(east.bootstrap, live_topic, 2) as live:
            produce(20, "a")
            first_app = app = drivers[0].start().wait_app(cluster)
            # the target has no aborted records nor markers: its partitions end at 1500
            _wait_mirrored(east, west, topic, cluster.paced(90), "the backlog", {0: 1500, 1: 1500})
            settled({0: 20, 1: 20, 2: 20})
            # the group's offsets, translated, are checkpointed and committed to the target group
            want = _where_landed(east, west, topic, committed)
            assert want != committed, "source and target offsets should differ (the aborted transaction)"
            wait_until(lambda: _target_group(west, group) == want, cluster.paced(60), 0.5,
                       f"the target group at the translated offsets {want}")
            latest = _latest_checkpoints(west, group)
            assert {tp.partition: (cp.upstream_offset, cp.downstream_offset)
                    for tp, cp in latest.items()} == {p: (committed[p], want[p]) for p in (0, 1)}
            # the executors' Python workers import this checkout (the daemons' environment has no
            # PYTHONPATH: the driver's settings gave it to them)
            paths = _executor_pythonpaths(cluster, app)
            assert paths and all(str(ROOT) in p for p in paths), paths

            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
                # pause returns once the leases have committed and released: the target holds while
                # the source grows, and resume catches up exactly
                assert http.post(f"{path}/pause").json()["state"] == "PAUSED"
                offsets = http.get(f"{path}/offsets").json()["offsets"]
                assert {o["partition"]: o["position"] for o in offsets} == {0: 20, 1: 20, 2: 20}
                produce(5, "p")
                assert end_offsets(east.bootstrap, halted) == {0: 25, 1: 25, 2: 25}
                status = http.get(path).json()
                assert status["state"] == "PAUSED" and "RUNNING" not in {t["state"] for t in status["tasks"]}
                assert end_offsets(west.bootstrap, remote) == {0: 20, 1: 20, 2: 20}
                assert http.post(f"{path}/resume").json()["state"] == "RUNNING"
                settled({0: 25, 1: 25, 2: 25})

                assert http.post(f"{path}/stop").json()["state"] == "STOPPED"
                produce(10, "b")
                r = http.patch(f"{path}/offsets", json={"offsets": [
                    {"topic": halted, "partition": 1, "offset": "earliest"}]})
                assert r.status_code == 200, r.text
                assert http.post(f"{path}/resume").json()["state"] == "RUNNING"
                settled({0: 35, 1: 60, 2: 35})

                assert http.post(f"{path}/stop").json()["state"] == "STOPPED"
                r = http.delete(f"{path}/offsets")
                assert r.status_code == 200 and {o["position"] for o in r.json()["offsets"]} == {None}, r.text
                produce(5, "c")
                assert http.post(f"{path}/resume").json()["state"] == "RUNNING"
                settled({0: 75, 1: 100, 2: 75})

            at_start = live_mirrored()
            for kill, (dead, fresh) in enumerate(itertools.pairwise(drivers)):
                # the second kill comes 1,000 records later into its driver's leases than the first
                goal = at_start + 1000 * (kill + 1)
                wait_until(lambda g=goal: live_mirrored() >= g, cluster.paced(90), 0.1, "mirroring under way")
                if kill == 0:
                    dead.kill_python()
                else:
                    dead.kill()
                at_kill = live_mirrored()
                if fresh is drivers[-1]:
                    # with no driver running (its executors gone too: nothing of it commits behind
                    # the tool's back), ``mm2py flow-offsets`` reads what the leases committed and
                    # moves a position; the next driver's leases start there
                    wait_until(lambda a=app: not cluster.app_processes(a), cluster.paced(60), 0.2,
                               f"the killed driver's executors ({app}) to be gone")
                    flow = ["-c", str(config), "--flow", f"{alias}->west"]
                    assert _cli(capsys, "flow-offsets", "get", *flow, "--json") == [
                        {"topic": halted, "partition": p, "position": 40, "target_topic": remote,
                         "target_offset": {0: 75, 1: 100, 2: 75}[p]} for p in range(3)]
                    _cli(capsys, "flow-offsets", "reset", *flow, "-p", f"{halted}:2", "--to", "35",
                         "--execute")
                fresh.start()
                # the master ends the dead driver's application and its workers kill its executors:
                # nothing of it is left to write to the target behind the new driver's back
                wait_until(lambda a=app: not cluster.app_processes(a), cluster.paced(60), 0.2,
                           f"the killed driver's executors ({app}) to be gone")
                app = fresh.wait_app(cluster, before=app)
                at_start = at_kill
            wait_until(lambda: live_mirrored() >= at_start + 1000, cluster.paced(90), 0.2,
                       "the last driver to mirror live records")
            settled({0: 75, 1: 100, 2: 80})
            live_total = live.stop()
        _wait_mirrored(east, west, live_topic, cluster.paced(90), "everything produced")
        drivers[-1].stop()
    finally:
        for driver in drivers:
            driver.reap()
    assert _assert_mirrored_exactly(east, west, topic) == 3000
    _assert_offsets_translate(east, west, topic)
    assert _assert_mirrored_exactly(east, west, live_topic) == live_total
    # the leases ran on the standalone workers' executors
    logs = [p.read_text(errors="replace")
            for paths in cluster.executor_logs(first_app).values() for p in paths]
    assert any("Executor: Running task" in text for text in logs), f"no executor of {first_app} ran a task"
    a, paused, b, c = batches
    target = read_all(west.bootstrap, remote)
    got = {p: [r.content() for r in target if r.partition == p] for p in range(3)}
    # partition 0 once, then everything again after the forget; partition 1 moved to its start
    # first; partition 2 as 0, then moved back five by the CLI: its last five once more
    assert got[0] == 2 * (a[0] + paused[0] + b[0]) + c[0]
    assert got[1] == a[1] + paused[1] + 2 * (a[1] + paused[1] + b[1]) + c[1]
    assert got[2] == 2 * (a[2] + paused[2] + b[2]) + c[2] + c[2]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    """``mm2py ARGS`` in this process; its JSON output when it printed some."""
    import json

    from mm2py.cli import main

    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out) if "--json" in args else out
