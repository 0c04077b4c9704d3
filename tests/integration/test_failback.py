"""Failover and failback on real brokers, exact both ways, and translation for offsets kept elsewhere.

The source topic's partitions hold committed and aborted transactions (so source and target offsets
differ, and consumers stop inside aborted stretches and on transaction markers). Consumer groups at
different lags read part of it on the source; the mirror stops; the groups are failed over
(``mm2py offsets apply``), read and commit more on the target, are failed back (``--direction
back``) and read the rest on the source: each group reads every record exactly once, in order.
The REST translate endpoint and the JSON offsets map are checked both ways against where records
actually are (found by their content).
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from helpers import (
    config_file,
    create_topic,
    end_offsets,
    mirror_config,
    read_all,
    served_worker,
    unique,
    wait_until,
)

from mm2py.cli import main
from mm2py.config.models import load_config
from mm2py.engine.translation import Direction
from mm2py.kafka_local import KafkaCluster
from mm2py.runtime.translator import FlowTranslator

pytestmark = pytest.mark.integration

PARTITIONS = (0, 1)
FORWARD, BACK = Direction.FORWARD, Direction.BACK
#: records each group reads on the source first (None: all): inside an aborted transaction's
#: stretch, on a marker, near the start, at the end
FIRST_READ = {"inside-aborted": 16, "on-marker": 10, "far-behind": 1, "caught-up": None}


def _seed(bootstrap: str, topic: str) -> None:
    """Per partition: four rounds of 6 plain records and a 4-record transaction (rounds 0 and 2
    committed, 1 and 3 aborted), then 5 plain records: 37 visible records over offsets 0-48."""
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx"), "linger.ms": 5})
    tx.init_transactions(30)
    for r in range(4):
        for p in PARTITIONS:
            for i in range(6):
                plain.produce(topic, f"plain-{r}-{p}-{i}".encode(), partition=p)
        plain.flush(30)
        tx.begin_transaction()
        for p in PARTITIONS:
            for i in range(4):
                tx.produce(topic, f"tx-{r}-{p}-{i}".encode(), partition=p)
        tx.flush(30)  # on the broker before the abort
        tx.abort_transaction(30) if r % 2 else tx.commit_transaction(30)
        # the coordinator writes the markers after it answers: wait for them, so that the layout is
        # the same every run (a marker at 10, 21, 32 and 43 of each partition)
        wait_until(lambda r=r: end_offsets(bootstrap, topic) == {p: 11 * (r + 1) for p in PARTITIONS},
                   30, 0.05, "transaction markers")
    for p in PARTITIONS:
        for i in range(5):
            plain.produce(topic, f"last-{p}-{i}".encode(), partition=p)
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
