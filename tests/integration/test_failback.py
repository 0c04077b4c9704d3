"""Failover and failback on real brokers, exact both ways, and translation for offsets kept elsewhere.

The source topic's partitions hold committed and aborted transactions (so source and target offsets
differ, and consumers stop inside aborted stretches and on transaction markers). Consumer groups at
different lags read part of it on the source; the mirror stops; the groups are failed over
(``mm2py offsets apply``), read and commit more on the target, are failed back (``--direction
back``) and read the rest on the source: each group reads every record exactly once, in order.
The REST translate endpoint and the JSON offsets map are checked both ways against where records
actually are (found by their content). A Spark Structured Streaming query that read the source
topic is restarted on the target from its checkpoint as ``mm2py offsets rewrite`` moved it, and
reads each record once (spark-sql-kafka from Maven Central: the harness pom's ``spark-kafka``
profile).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.cli import main
from mm2py.config.models import load_config
from mm2py.engine.translation import Direction
from mm2py.kafka_local import KafkaCluster, resolve_jars
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.translator import FlowTranslator
from tests.support.brokers import (
    BackgroundWorker,
    config_file,
    create_topic,
    end_offsets,
    mirror_config,
    read_all,
    served_worker,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

PARTITIONS = (0, 1)
FORWARD, BACK = Direction.FORWARD, Direction.BACK
#: records each group reads on the source first (None: all): inside an aborted transaction's
#: stretch, on a marker, near the start, at the end
FIRST_READ = {"inside-aborted": 16, "on-marker": 10, "far-behind": 1, "caught-up": None}


def _seed(bootstrap: str, topic: str, tag: str = "", start: int = 0) -> None:
    """Per partition: four rounds of 6 plain records and a 4-record transaction (rounds 0 and 2
    committed, 1 and 3 aborted), then 5 plain records: 37 visible records over 49 offsets from
    ``start`` (``start`` + 0-48)."""
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx"), "linger.ms": 5})
    tx.init_transactions(30)
    for r in range(4):
        for p in PARTITIONS:
            for i in range(6):
                plain.produce(topic, f"{tag}plain-{r}-{p}-{i}".encode(), partition=p)
        plain.flush(30)
        tx.begin_transaction()
        for p in PARTITIONS:
            for i in range(4):
                tx.produce(topic, f"{tag}tx-{r}-{p}-{i}".encode(), partition=p)
        tx.flush(30)  # on the broker before the abort
        tx.abort_transaction(30) if r % 2 else tx.commit_transaction(30)
        # the coordinator writes the markers after it answers: wait for them, so that the layout is
        # the same every run (a marker at 10, 21, 32 and 43 of each partition)
        wait_until(lambda r=r: end_offsets(bootstrap, topic) == {p: start + 11 * (r + 1) for p in PARTITIONS},
                   30, 0.05, "transaction markers")
    for p in PARTITIONS:
        for i in range(5):
            plain.produce(topic, f"{tag}last-{p}-{i}".encode(), partition=p)
    plain.flush(30)


_NOT_YET = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT}


def _committed(c: Consumer, topic: str) -> list[CKTopicPartition]:
    """The group's committed offsets, asked again while a new group's coordinator is not ready."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return list(c.committed([CKTopicPartition(topic, p) for p in PARTITIONS], timeout=5))
        except KafkaException as exc:
            if exc.args[0].code() not in _NOT_YET or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _consume(bootstrap: str, group: str, topic: str, count: int | None) -> dict[int, list[bytes]]:
    """``group`` reads ``count`` records of each partition (None: up to the end) from its committed
    offsets, and commits where it stopped."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    read: dict[int, list[bytes]] = {p: [] for p in PARTITIONS}
    position: dict[int, int] = {}
    try:
        starts = _committed(c, topic)
        c.assign([CKTopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                  for tp in starts])  # from the committed offsets
        done: set[int] = set()
        while len(done) < len(PARTITIONS) and count != 0:
            msg = c.poll(10)
            assert msg is not None, f"{group} on {topic}: read timed out"
            p = msg.partition()
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                done.add(p)
                continue
            if p in done:
                continue
            read[p].append(msg.value())
            position[p] = msg.offset() + 1
            if count is not None and len(read[p]) >= count:
                done.add(p)
                c.pause([CKTopicPartition(topic, p)])
        if position:
            c.commit(offsets=[CKTopicPartition(topic, p, o) for p, o in position.items()], asynchronous=False)
    finally:
        c.close()
    return read


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


class Where:
    """Where each source record is on the target (by content), for the expected translations."""

    def __init__(self, east: KafkaCluster, west: KafkaCluster, topic: str) -> None:
        self.source = read_all(east.bootstrap, topic)
        target = read_all(west.bootstrap, f"east.{topic}")
        self.at = {(r.partition, r.value): r.offset for r in target}
        self.target_end = {p: sum(1 for r in target if r.partition == p) for p in PARTITIONS}

    def forward(self, p: int, u: int) -> int:
        """The target offset of the first source record at or after ``u``."""
        nxt = next((r for r in self.source if r.partition == p and r.offset >= u), None)
        return self.target_end[p] if nxt is None else self.at[(p, nxt.value)]

    def record_at(self, p: int, d: int) -> int:
        """The source offset of the record at target offset ``d``."""
        value = next(v for (q, v), o in self.at.items() if q == p and o == d)
        return next(r.offset for r in self.source if r.partition == p and r.value == value)


def test_failover_then_failback_is_exact_both_ways(east: KafkaCluster, west: KafkaCluster,
                                                   tmp_path: Path) -> None:
    topic = create_topic(east.bootstrap, unique("fb"), partitions=len(PARTITIONS))
    _seed(east.bootstrap, topic)
    groups = {name: unique(name) for name in FIRST_READ}
    reads = {g: [_consume(east.bootstrap, groups[g], topic, n)] for g, n in FIRST_READ.items()}
    settings = {"topics": topic, "emit.checkpoints.enabled": False}  # failover by the offset syncs alone
    clusters = {"east": east.bootstrap, "west": west.bootstrap}
    cfg = config_file(tmp_path / "mm2.json", clusters, {"east->west": settings})
    source_end = 49  # 37 visible records, 8 aborted, 4 markers

    with served_worker(mirror_config(clusters, {"east->west": settings})) as url:
        def translate(**query: Any) -> httpx.Response:
            return httpx.get(f"{url}/flows/east->west/translate", params=query, timeout=30)

        # mirrored and committed up to the source's end: its end translates to the target's
        wait_until(lambda: all(translate(topic=topic, partition=p, offset=source_end).status_code == 200
                               for p in PARTITIONS), 60, 0.3, "mirror committed to the end")
        where = Where(east, west, topic)
        assert where.target_end == {0: 37, 1: 37}
        for p in PARTITIONS:  # the REST API, both ways
            for u in (17, source_end):  # a position inside an aborted stretch, the end
                body = translate(topic=topic, partition=p, offset=u).json()
                assert (body["target_topic"], body["target_offset"]) == (f"east.{topic}", where.forward(p, u))
                d = body["target_offset"]
                back = translate(topic=f"east.{topic}", partition=p, offset=d, direction="back").json()
                want = source_end if d == where.target_end[p] else where.record_at(p, d)
                assert (back["source_topic"], back["source_offset"]) == (topic, want), (u, d)
        r = translate(topic=f"east.{topic}", partition=0, offset=38, direction="back")
        assert r.status_code == 400 and "past what the flow has mirrored" in r.json()["error"]
        assert translate(topic=topic, partition=5, offset=1).status_code == 404

    # every position either way, by the translator the API and the commands use
    tr = FlowTranslator.read(load_config(str(cfg)).flow("east", "west"))
    for p in PARTITIONS:
        assert [tr.translate(topic, p, u, FORWARD).target_offset for u in range(source_end + 1)] == [
            where.forward(p, u) for u in range(source_end + 1)]
        assert [tr.translate(f"east.{topic}", p, d, BACK).source_offset for d in range(38)] == [
            where.record_at(p, d) for d in range(37)] + [source_end]
    # the JSON offsets map, both ways
    (tmp_path / "east.json").write_text(json.dumps({topic: {"0": 17, "1": 10}}))
    code, out, err = _cli("offsets", "rewrite", "-c", str(cfg), "--flow", "east->west",
                          "--json-map", str(tmp_path / "east.json"))
    assert code == 0, err
    assert json.loads(out) == {f"east.{topic}": {"0": where.forward(0, 17), "1": where.forward(1, 10)}}
    (tmp_path / "west.json").write_text(out)
    code, _, err = _cli("offsets", "rewrite", "-c", str(cfg), "--flow", "east->west", "--direction", "back",
                        "--json-map", str(tmp_path / "west.json"), "-o", str(tmp_path / "back.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "back.json").read_text()) == {topic: {"0": 22, "1": 11}}  # next records

    # failover: the groups move to the target, read five records of each partition there, commit
    names = ["--group=" + g for g in groups.values()]
    code, out, err = _cli("offsets", "apply", "-c", str(cfg), "--flow", "east->west", *names, "--execute")
    assert code == 0, err
    for g in FIRST_READ:
        reads[g].append(_consume(west.bootstrap, groups[g], f"east.{topic}", 5))
    # a group with a member on the source is not moved there
    member = Consumer({"bootstrap.servers": east.bootstrap, "group.id": groups["on-marker"],
                       "enable.auto.commit": False})
    member.subscribe([topic])
    try:
        wait_until(lambda: (member.poll(0.2), member.assignment())[1] != [], 30, 0.1, "active member")
        code, _, err = _cli("offsets", "apply", "-c", str(cfg), "--flow", "east->west", "--direction", "back",
                            *names, "--execute")
        assert code == 2 and f"group {groups['on-marker']!r} is active on 'east'" in err, err
    finally:
        member.close()
    # failback: back to the source, by the forward flow's own offset syncs; the rest read there
    code, out, err = _cli("offsets", "apply", "-c", str(cfg), "--flow", "east->west", "--direction", "back",
                          *names, "--execute", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert {r["direction"] for r in rows} == {"back"} and len(rows) == len(groups) * len(PARTITIONS)
    for g in FIRST_READ:
        reads[g].append(_consume(east.bootstrap, groups[g], topic, None))

    visible = {p: [r.value for r in where.source if r.partition == p] for p in PARTITIONS}
    for g, (on_source, on_target, back_on_source) in reads.items():
        for p in PARTITIONS:
            assert on_source[p] + on_target[p] + back_on_source[p] == visible[p], (g, p)  # once, in order
    assert [len(reads["far-behind"][i][0]) for i in range(3)] == [1, 5, 31]
    assert [len(reads["caught-up"][i][0]) for i in range(3)] == [37, 0, 0]


# --------------------------------------------------------------------- Spark Structured Streaming

#: a streaming query reading a Kafka topic in batches of at most 20 offsets (so that its checkpoint
#: holds batches ending inside aborted stretches and on markers) until what is there now is read, the
#: records it read written to a JSON file; then, once a "go" file names them, the same query on
#: another cluster, topic and checkpoint (one Spark application: one JVM start)
SPARK_JOB = """
import json, pathlib, sys, time
from pyspark.sql import SparkSession

jars, first, go = sys.argv[1], json.loads(sys.argv[2]), pathlib.Path(sys.argv[3])
spark = (SparkSession.builder.master("local[1]").appName("mm2py-failover")
         .config("spark.jars", jars).config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "1")
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

def run(bootstrap, topic, checkpoint, out):
    rows = []
    def sink(df, batch_id):
        rows.extend((r.partition, r.value.decode()) for r in df.select("partition", "value").collect())
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("kafka.isolation.level", "read_committed").option("maxOffsetsPerTrigger", "20").load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    pathlib.Path(out).write_text(json.dumps(rows))

run(*first)
deadline = time.monotonic() + 120
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
run(*json.loads(go.read_text()))
spark.stop()
"""


def _values(path: Path) -> dict[int, list[str]]:
    """The values a query read, per partition, in order."""
    read: dict[int, list[str]] = {p: [] for p in PARTITIONS}
    for partition, value in json.loads(path.read_text()):
        read[partition].append(value)
    return read


def test_spark_query_fails_over_with_a_rewritten_checkpoint(east: KafkaCluster, west: KafkaCluster,
                                                            tmp_path: Path) -> None:
    topic = create_topic(east.bootstrap, unique("spark"), partitions=len(PARTITIONS))
    _seed(east.bootstrap, topic)
    jars = ",".join(str(j) for j in sorted(resolve_jars(profile="spark-kafka").glob("*.jar")))
    (tmp_path / "job.py").write_text(SPARK_JOB)
    first = [east.bootstrap, topic, str(tmp_path / "cp-east"), str(tmp_path / "east.json")]
    go = tmp_path / "go.json"
    job = subprocess.Popen([sys.executable, str(tmp_path / "job.py"), jars, json.dumps(first), str(go)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (tmp_path / "east.json").exists() or job.poll() is not None, 120, 0.1,
                   "the query on east")
        assert job.poll() is None, job.communicate()[1][-4000:]
        _seed(east.bootstrap, topic, "more-", start=49)  # what the query has not read when east is lost
        settings = {"topics": topic, "emit.checkpoints.enabled": False}
        clusters = {"east": east.bootstrap, "west": west.bootstrap}
        cfg = config_file(tmp_path / "mm2.json", clusters, {"east->west": settings})
        flow = load_config(str(cfg)).flow("east", "west")

        def mirrored() -> bool:
            positions = FlowTranslator.read(flow).positions
            ends = [positions.get(TopicPartition(topic, p)) for p in PARTITIONS]
            return all(end is not None and end.source == 98 for end in ends)

        with BackgroundWorker(mirror_config(clusters, {"east->west": settings})):
            wait_until(mirrored, 60, 0.3, "mirror committed to the end")
        code, out, err = _cli("offsets", "rewrite", "-c", str(cfg), "--flow", "east->west",
                              "--spark-checkpoint", str(tmp_path / "cp-east"),
                              "-o", str(tmp_path / "cp-west"))
        assert code == 0 and "rewritten" in out, err
        # the query restarted on west, from the rewritten checkpoint, subscribed to east.<topic>
        go.write_text(json.dumps([west.bootstrap, f"east.{topic}", str(tmp_path / "cp-west"),
                                  str(tmp_path / "west.json")]))
        assert job.wait(120) == 0, job.communicate()[1][-4000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    before, after = _values(tmp_path / "east.json"), _values(tmp_path / "west.json")
    visible = {p: [r.value.decode() for r in read_all(east.bootstrap, topic) if r.partition == p]
               for p in PARTITIONS}
    for p in PARTITIONS:
        assert len(before[p]) == 37 and len(after[p]) == 37
        assert before[p] + after[p] == visible[p], p  # each record once, in order
