"""Failover and failback on real brokers, exact both ways at any lag, and translation for offsets
kept elsewhere.

The drill: a source topic of 3 partitions, each a stretch of committed and aborted transactions
(so source and target offsets differ, and consumers stop inside aborted stretches and on
transaction markers), 34,000 tiny records, and another such stretch. Six consumer groups at
different lags, the furthest 102,219 records behind (34,073 a partition). The offset-syncs topic
compacts at once (a small ``segment.ms`` and dirty ratio on it), so it forgets every sync of the
older stretches: the far-behind groups translate exactly through mm2py's sync history only. The
groups are failed over (``mm2py offsets apply``), read and commit on the target, are failed back
(``--direction back``) and read the rest on the source: each group reads every record from its
position exactly once, in order, checked record by record. The REST translate endpoint and the
JSON offsets map are checked both ways against where records actually are. A Spark Structured
Streaming query that read the source topic is restarted on the target from its checkpoint as
``mm2py offsets rewrite`` moved it, and reads each record once (spark-sql-kafka from Maven Central:
the harness pom's ``spark-kafka`` profile).
"""

from __future__ import annotations

import bisect
import contextlib
import io
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.cli import main
from mm2py.config.models import load_config
from mm2py.connectors.sync_history import SyncHistoryPruner
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.engine.translation import BeforeSyncsError, Direction, PartitionMap
from mm2py.kafka_local import KafkaCluster, resolve_jars
from mm2py.operations.translator import FlowTranslator
from mm2py.protocol.types import TopicPartition
from tests.support.brokers import (
    BackgroundWorker,
    admin,
    config_file,
    create_topic,
    end_offsets,
    mirror_config,
    read_all,
    read_syncs,
    served_worker,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

PARTITIONS = (0, 1)  # the Spark query's topic
FORWARD, BACK = Direction.FORWARD, Direction.BACK


def _seed(bootstrap: str, topic: str, tag: str = "", start: int = 0, partitions: tuple[int, ...] = PARTITIONS
          ) -> None:
    """Per partition: four rounds of 6 plain records and a 4-record transaction (rounds 0 and 2
    committed, 1 and 3 aborted), then 5 plain records: 37 visible records over 49 offsets from
    ``start`` (``start`` + 0-48; aborted 17-20 and 39-42, markers at 10, 21, 32, 43)."""
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx"), "linger.ms": 5})
    tx.init_transactions(30)
    for r in range(4):
        for p in partitions:
            for i in range(6):
                plain.produce(topic, f"{tag}plain-{r}-{p}-{i}".encode(), partition=p)
        plain.flush(30)
        tx.begin_transaction()
        for p in partitions:
            for i in range(4):
                tx.produce(topic, f"{tag}tx-{r}-{p}-{i}".encode(), partition=p)
        tx.flush(30)  # on the broker before the abort
        tx.abort_transaction(30) if r % 2 else tx.commit_transaction(30)
        # the coordinator writes the markers after it answers: wait for them, so that the layout is
        # the same every run (a marker at 10, 21, 32 and 43 of each partition)
        wait_until(lambda r=r: end_offsets(bootstrap, topic) == {p: start + 11 * (r + 1) for p in partitions},
                   30, 0.05, "transaction markers")
    for p in partitions:
        for i in range(5):
            plain.produce(topic, f"{tag}last-{p}-{i}".encode(), partition=p)
    plain.flush(30)


def _bulk(bootstrap: str, topic: str, partitions: tuple[int, ...], count: int) -> None:
    """``count`` tiny records on each partition, in large batches."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "batch.num.messages": 100_000, "queue.buffering.max.messages": 1_000_000,
                         "enable.idempotence": True})
    for p in partitions:
        for i in range(count):
            producer.produce(topic, b"b%d" % i, partition=p)
        producer.poll(0)
    assert producer.flush(60) == 0


_NOT_YET = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT}


def _retrying(call: Any) -> Any:
    """``call()``, again while a new group's coordinator is not ready."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return call()
        except KafkaException as exc:
            if exc.args[0].code() not in _NOT_YET or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """``group`` commits ``offsets`` (a consumer that read up to there and stopped)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        _retrying(lambda: c.commit(offsets=[CKTopicPartition(topic, p, o) for p, o in offsets.items()],
                                   asynchronous=False))
    finally:
        c.close()


def _consume(bootstrap: str, group: str, topic: str, count: int | None,
             partitions: tuple[int, ...] = PARTITIONS) -> dict[int, list[bytes]]:
    """``group`` reads ``count`` records of each partition (None: up to the end) from its committed
    offsets, and commits where it stopped."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    read: dict[int, list[bytes]] = {p: [] for p in partitions}
    position: dict[int, int] = {}
    try:
        starts = _retrying(lambda: c.committed([CKTopicPartition(topic, p) for p in partitions], timeout=5))
        c.assign([CKTopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                  for tp in starts])  # from the committed offsets
        done: set[int] = set()
        while len(done) < len(partitions) and count != 0:
            for msg in _take(c, f"{group} on {topic}"):
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


def _take(c: Consumer, what: str) -> list[Any]:
    """What the consumer has now, at least one message or event: waits for the first only
    (``consume`` with a time-out waits for a full batch)."""
    first = c.poll(10)
    assert first is not None, f"{what}: read timed out"
    return [first, *c.consume(1000, 0)]


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _visible(bootstrap: str, topic: str, partitions: tuple[int, ...]
             ) -> dict[int, tuple[list[int], list[bytes]]]:
    """Each partition's records a read_committed consumer sees: (offsets, values), in order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    out: dict[int, tuple[list[int], list[bytes]]] = {p: ([], []) for p in partitions}
    try:
        c.assign([CKTopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        done: set[int] = set()
        while len(done) < len(partitions):
            for msg in _take(c, f"reading {topic}"):
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    done.add(msg.partition())
                    continue
                offsets, values = out[msg.partition()]
                offsets.append(msg.offset())
                values.append(msg.value())
    finally:
        c.close()
    return out


class Where:
    """Where each source record is on the target, for the expected translations. The target
    partition holds exactly the source's visible records, in order, from offset 0 (checked), so the
    k-th visible source record is at target offset k."""

    def __init__(self, east: KafkaCluster, west: KafkaCluster, topic: str, partitions: tuple[int, ...],
                 source_end: int) -> None:
        self.source = _visible(east.bootstrap, topic, partitions)
        target = _visible(west.bootstrap, f"east.{topic}", partitions)
        for p in partitions:
            values = self.source[p][1]
            assert target[p] == (list(range(len(values))), values), p  # mirrored exactly
        self.source_end = source_end
        self.target_end = {p: len(target[p][0]) for p in partitions}

    def forward(self, p: int, u: int) -> int:
        """The target offset of the first source record at or after ``u``."""
        return bisect.bisect_left(self.source[p][0], u)

    def back(self, p: int, d: int) -> int:
        """The source offset of the record at target offset ``d`` (the source's end past the last)."""
        offsets = self.source[p][0]
        return offsets[d] if d < len(offsets) else self.source_end

    def values_from(self, p: int, u: int) -> list[bytes]:
        """The records a consumer at source position ``u`` has still to read, in order."""
        return self.source[p][1][self.forward(p, u):]


DRILL = (0, 1, 2)
BULK = 34_000  # tiny records of each partition between the two transactional stretches
C = 49 + BULK  # where the second transactional stretch starts
#: each group's position on the source, on every partition: at different lags, inside aborted
#: stretches and on markers; "far-behind" is 3 x 34,073 = 102,219 records behind
STARTS = {"far-behind": 1, "inside-aborted": 18, "mid-bulk": 49 + BULK // 2, "on-marker": C + 21,
          "inside-aborted-late": C + 40, "caught-up": C + 49}
#: the offset-syncs topic and the sync history as the drill creates them: compacted within seconds
COMPACT_NOW = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"}


def _each_group(read: Callable[[str], dict[int, list[bytes]]]) -> dict[str, dict[int, list[bytes]]]:
    """``read(group)`` for every group of the drill, the six at once (each mostly waits)."""
    with ThreadPoolExecutor(len(STARTS)) as pool:
        return dict(zip(STARTS, pool.map(read, STARTS), strict=True))


def test_failover_then_failback_is_exact_both_ways(east: KafkaCluster, west: KafkaCluster,
                                                   tmp_path: Path) -> None:
    topic = create_topic(east.bootstrap, unique("fb"), partitions=len(DRILL))
    target = f"fb{uuid.uuid4().hex[:8]}"  # west by an alias of its own: offset-syncs topics of their own
    flow_name = f"east->{target}"
    syncs_topic = f"mm2-offset-syncs.{target}.internal"
    for name in (syncs_topic, f"mm2py-offset-sync-history.{target}.internal"):
        create_topic(east.bootstrap, name, config=COMPACT_NOW)
    _seed(east.bootstrap, topic, partitions=DRILL)
    _bulk(east.bootstrap, topic, DRILL, BULK)
    groups = {name: unique(name) for name in STARTS}
    for name, start in STARTS.items():
        _commit(east.bootstrap, groups[name], topic, dict.fromkeys(DRILL, start))
    settings = {"topics": topic, "emit.checkpoints.enabled": False}  # failover by the offset syncs alone
    clusters = {"east": east.bootstrap, target: west.bootstrap}
    cfg = config_file(tmp_path / "mm2.json", clusters, {flow_name: settings})
    flow = load_config(str(cfg)).flow("east", target)
    source_end = C + 49

    def mirrored_to(end: int) -> bool:
        positions = FlowTranslator.read(flow).positions
        return all((pos := positions.get(TopicPartition(topic, p))) is not None and pos.source == end
                   for p in DRILL)

    with served_worker(mirror_config(clusters, {flow_name: settings})) as url:
        def translate(**query: Any) -> httpx.Response:
            return httpx.get(f"{url}/flows/{flow_name}/translate", params=query, timeout=30)

        wait_until(lambda: mirrored_to(C), 120, 0.3, "the first stretch and the bulk mirrored")
        # written later, the second stretch's syncs roll the offset-syncs topic's segment: the
        # cleaner compacts what came before
        _seed(east.bootstrap, topic, "late-", start=C, partitions=DRILL)
        wait_until(lambda: mirrored_to(source_end), 60, 0.3, "mirror committed to the end")

        def compacted() -> bool:  # no sync of the first stretch and the bulk is left on the topic
            left = [s for s in read_syncs(east.bootstrap, syncs_topic) if s.topic_partition.topic == topic]
            return {s.topic_partition.partition for s in left} == set(DRILL) and min(
                s.upstream_offset for s in left) >= C - 100
        wait_until(compacted, 60, 0.5, f"{syncs_topic} compacted")

        where = Where(east, west, topic, DRILL, source_end)
        assert where.target_end == dict.fromkeys(DRILL, 37 + BULK + 37)
        # the REST API, both ways: positions inside aborted stretches, the end (every position: by
        # the translator below)
        for p, u in ((0, 17), (1, C + 17), (2, source_end)):
            body = translate(topic=topic, partition=p, offset=u).json()
            assert (body["target_topic"], body["target_offset"]) == (f"east.{topic}", where.forward(p, u))
            d = body["target_offset"]
            back = translate(topic=f"east.{topic}", partition=p, offset=d, direction="back").json()
            assert (back["source_topic"], back["source_offset"]) == (topic, where.back(p, d)), (u, d)
        r = translate(topic=f"east.{topic}", partition=0, offset=where.target_end[0] + 1, direction="back")
        assert r.status_code == 400 and "past what the flow has mirrored" in r.json()["error"]
        assert translate(topic=topic, partition=5, offset=1).status_code == 404

    # every position of the transactional stretches either way, and every 97th of the bulk, by the
    # translator the API and the commands use; the offset-syncs topic alone no longer knows the first
    tr = FlowTranslator.read(flow)
    stretches = [*range(0, 50), *range(49, C, 97), *range(C, source_end + 1)]
    for p in DRILL:
        assert [tr.translate(topic, p, u, FORWARD).target_offset for u in stretches] == [
            where.forward(p, u) for u in stretches]
        ds = [*range(0, 38), *range(37, 37 + BULK, 97), *range(37 + BULK, where.target_end[p] + 1)]
        assert [tr.translate(f"east.{topic}", p, d, BACK).source_offset for d in ds] == [
            where.back(p, d) for d in ds]
        mm2_only = OffsetSyncStore()
        for s in read_syncs(east.bootstrap, syncs_topic):
            mm2_only.add(s)
        tp = TopicPartition(topic, p)
        with pytest.raises(BeforeSyncsError):
            PartitionMap.of(tp, mm2_only.syncs(tp), tr.positions[tp]).forward(STARTS["far-behind"])
    # the JSON offsets map, both ways
    (tmp_path / "east.json").write_text(json.dumps({topic: {"0": 17, "1": 10, "2": C + 21}}))
    code, out, err = _cli("offsets", "rewrite", "-c", str(cfg), "--flow", flow_name,
                          "--json-map", str(tmp_path / "east.json"))
    assert code == 0, err
    assert json.loads(out) == {f"east.{topic}": {"0": where.forward(0, 17), "1": where.forward(1, 10),
                                                 "2": where.forward(2, C + 21)}}
    (tmp_path / "west.json").write_text(out)
    code, _, err = _cli("offsets", "rewrite", "-c", str(cfg), "--flow", flow_name, "--direction", "back",
                        "--json-map", str(tmp_path / "west.json"), "-o", str(tmp_path / "back.json"))
    assert code == 0, err
    # the next records: 17 is aborted, so 22; 10 is a marker, so 11
    assert json.loads((tmp_path / "back.json").read_text()) == {topic: {"0": 22, "1": 11, "2": C + 22}}

    # failover: the groups move to the target, read five records of each partition there, commit
    names = ["--group=" + g for g in groups.values()]
    code, out, err = _cli("offsets", "apply", "-c", str(cfg), "--flow", flow_name, *names, "--execute")
    assert code == 0, err
    on_target = _each_group(lambda g: _consume(west.bootstrap, groups[g], f"east.{topic}", 5, DRILL))
    # a group with a member on the source is not moved there
    member = Consumer({"bootstrap.servers": east.bootstrap, "group.id": groups["on-marker"],
                       "enable.auto.commit": False})
    member.subscribe([topic])
    try:
        wait_until(lambda: (member.poll(0.2), member.assignment())[1] != [], 30, 0.1, "active member")
        code, _, err = _cli("offsets", "apply", "-c", str(cfg), "--flow", flow_name, "--direction", "back",
                            *names, "--execute")
        assert code == 2 and f"group {groups['on-marker']!r} is active on 'east'" in err, err
    finally:
        member.close()
    # failback: back to the source, by the forward flow's own offset syncs; the rest read there
    code, out, err = _cli("offsets", "apply", "-c", str(cfg), "--flow", flow_name, "--direction", "back",
                          *names, "--execute", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert {r["direction"] for r in rows} == {"back"} and len(rows) == len(groups) * len(DRILL)
    back_on_source = _each_group(lambda g: _consume(east.bootstrap, groups[g], topic, None, DRILL))

    for g, start in STARTS.items():
        for p in DRILL:  # record by record: nothing read twice, nothing skipped, either way
            rest = where.values_from(p, start)
            assert on_target[g][p] == rest[:5], (g, p, "failover")
            assert back_on_source[g][p] == rest[5:], (g, p, "failback")
    behind = sum(len(where.values_from(p, STARTS["far-behind"])) for p in DRILL)
    assert behind == 3 * (36 + BULK + 37) > 100_000
    assert [len(back_on_source["caught-up"][p]) for p in DRILL] == [0, 0, 0]

    # the source's log start passes the first stretch of partition 0: the history's points before it
    # are tombstoned, and every offset from it on still translates exactly
    log_start = 49 + BULK // 2
    client = admin(east.bootstrap)  # must outlive the future
    for future in client.delete_records([CKTopicPartition(topic, 0, log_start)]).values():
        future.result(30)
    pruner = SyncHistoryPruner(flow)
    try:
        assert pruner.prune() >= 4  # at least the run syncs of offsets 0, 11, 22 and 33
    finally:
        pruner.close()
    tr = FlowTranslator.read(flow)
    assert tr.translate(topic, 0, log_start, FORWARD).target_offset == where.forward(0, log_start)
    with pytest.raises(BeforeSyncsError):
        tr.translate(topic, 0, 18, FORWARD)
    assert tr.translate(topic, 1, 18, FORWARD).target_offset == where.forward(1, 18)  # untouched


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
    written = pathlib.Path(out + ".part")  # renamed whole: the test reads it once it exists
    written.write_text(json.dumps(rows))
    written.rename(out)

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
        # renamed whole: the job reads it as soon as it exists
        ready = go.with_suffix(".part")
        ready.write_text(json.dumps([west.bootstrap, f"east.{topic}", str(tmp_path / "cp-west"),
                                     str(tmp_path / "west.json")]))
        ready.rename(go)
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
