"""Checkpoints and consumer-group offset sync against real brokers, and the failover CLI.

Source partitions carry committed and aborted transactions, so source and target offsets differ;
a translated offset is checked against where the first record the source group had not consumed
yet actually landed on the target (found by its content).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.mm2_records import Checkpoint
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin, GroupOffset
from mm2py.runtime.metrics import WorkerCollector
from tests.support.brokers import (
    BackgroundWorker,
    config_file,
    consume_and_commit,
    create_topic,
    end_offsets,
    mirror_config,
    read_all,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

FAST = {
    "emit.checkpoints.interval.seconds": 1,
    "sync.group.offsets.enabled": True,
    "sync.group.offsets.interval.seconds": 1,
    "refresh.groups.interval.seconds": 1,
}


def _clusters(east: KafkaCluster, west: KafkaCluster) -> dict[str, str]:
    return {"east": east.bootstrap, "west": west.bootstrap}


def _seed(bootstrap: str, topic: str, partitions: int, rounds: int = 4) -> None:
    """Plain records, committed and aborted transactions interleaved in every partition."""
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx"), "linger.ms": 5})
    tx.init_transactions(30)
    for r in range(rounds):
        for p in range(partitions):
            for i in range(6):
                plain.produce(topic, f"plain-{r}-{p}-{i}".encode(), f"k{p}-{r}-{i}".encode(), partition=p)
        plain.flush(30)
        tx.begin_transaction()
        for p in range(partitions):
            for i in range(4):
                tx.produce(topic, f"tx-{r}-{p}-{i}".encode(), f"t{p}-{r}-{i}".encode(), partition=p)
        tx.flush(30)  # on the broker before the abort (librdkafka drops what it still holds)
        if r % 2:
            tx.abort_transaction(30)
        else:
            tx.commit_transaction(30)


def _expected_target_offsets(
    east: KafkaCluster, west: KafkaCluster, topic: str, committed: dict[int, int]
) -> dict[int, int]:
    """Target offset of the first record at or after each committed source offset (by content)."""
    source = read_all(east.bootstrap, topic)
    target = read_all(west.bootstrap, f"east.{topic}")
    assert sorted((r.partition, r.key, r.value) for r in target) == sorted(
        (r.partition, r.key, r.value) for r in source
    ), "mirror incomplete"
    where = {(r.partition, r.value): r.offset for r in target}
    ends = end_offsets(west.bootstrap, f"east.{topic}")
    out = {}
    for p, u in committed.items():
        nxt = next((r for r in source if r.partition == p and r.offset >= u), None)
        out[p] = where[(p, nxt.value)] if nxt is not None else ends[p]
    return out


def _unconsumed(bootstrap: str, topic: str, committed: dict[int, int]) -> list[tuple[Any, ...]]:
    return [(r.partition, r.key, r.value) for r in read_all(bootstrap, topic)
            if r.offset >= committed[r.partition or 0]]


def _target_group(west: KafkaCluster, group: str) -> dict[TopicPartition, GroupOffset]:
    return ClusterAdmin("west", west.bootstrap).group_offsets([group])[group]


def _checkpoints(west: KafkaCluster) -> list[Checkpoint]:
    records = read_all(west.bootstrap, "east.checkpoints.internal")
    return [Checkpoint.from_record(r.key, r.value) for r in records]


def _mirrored(east: KafkaCluster, west: KafkaCluster, topic: str) -> bool:
    try:
        got = read_all(west.bootstrap, f"east.{topic}", timeout=10)
        return len(got) == len(read_all(east.bootstrap, topic))
    except Exception:
        return False


def test_group_offsets_are_checkpointed_and_synced_exactly(east: KafkaCluster, west: KafkaCluster) -> None:
    topic = create_topic(east.bootstrap, unique("cp"), partitions=2)
    _seed(east.bootstrap, topic, 2)
    group = unique("g")
    committed = consume_and_commit(east.bootstrap, group, topic, {0: 17, 1: 9})
    config = mirror_config(_clusters(east, west), {"east->west": {"topics": topic, "groups": group, **FAST}})
    target_topic = f"east.{topic}"
    with BackgroundWorker(config) as bg:
        wait_until(lambda: _mirrored(east, west, topic), 60, 0.5, "topic mirrored")
        expected = _expected_target_offsets(east, west, topic, committed)
        want = {TopicPartition(target_topic, p): o for p, o in expected.items()}
        wait_until(lambda: {tp: o.offset for tp, o in _target_group(west, group).items()} == want,
                   30, 0.5, "target group at the translated offsets")
        status = bg.worker.flows["east->west"].status()["checkpoints"]
        samples = {s.name: s.value for family in WorkerCollector(bg.worker).collect() for s in family.samples
                   if s.labels.get("flow") == "east->west" and s.labels.get("group") in (None, group)}
    assert status["checkpoints_emitted"] >= 2 and status["group_syncs"] >= 1, status
    assert samples["mm2py_checkpoint_checkpoints_emitted_total"] == status["checkpoints_emitted"]
    assert samples["mm2py_checkpoint_offsets_synced_total"] >= 2 and samples["mm2py_checkpoint_groups"] == 1
    # checkpoint latency of the group: one observation per round that wrote its checkpoints
    assert samples["mm2py_checkpoint_latency_seconds_count"] >= 1
    assert 0 < samples["mm2py_checkpoint_latency_seconds_sum"] < 30
    assert expected != committed, "source and target offsets should differ (transaction markers)"

    latest = {cp.topic_partition: cp for cp in _checkpoints(west) if cp.group == group}
    assert {tp: cp.downstream_offset for tp, cp in latest.items()} == want
    assert {tp.partition: cp.upstream_offset for tp, cp in latest.items()} == committed

    # a consumer of the target group resumes with exactly what the source group had not read yet
    c = Consumer({"bootstrap.servers": west.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "enable.partition.eof": True})
    got: list[tuple[Any, ...]] = []
    try:
        c.assign([CKTopicPartition(target_topic, p) for p in (0, 1)])  # from the committed offsets
        eof: set[int] = set()
        while len(eof) < 2:
            msg = c.poll(5)
            assert msg is not None, "target read timed out"
            if msg.error():
                eof.add(msg.partition())
                continue
            got.append((msg.partition(), msg.key(), msg.value()))
    finally:
        c.close()
    assert sorted(got) == sorted(_unconsumed(east.bootstrap, topic, committed))
    assert got, "the source group had records left"


def test_sync_skips_active_target_groups_and_never_moves_offsets_back(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    topic = create_topic(east.bootstrap, unique("cpr"), partitions=1)
    _seed(east.bootstrap, topic, 1, rounds=2)
    target_topic = f"east.{topic}"
    create_topic(west.bootstrap, target_topic, partitions=1)  # the flow finds it there
    free, ahead, active = unique("free"), unique("ahead"), unique("active")
    committed = {g: consume_and_commit(east.bootstrap, g, topic, {0: 8}) for g in (free, ahead, active)}
    ttp = TopicPartition(target_topic, 0)
    ClusterAdmin("west", west.bootstrap).alter_group_offsets(ahead, {ttp: GroupOffset(15, "mine")})
    member = Consumer({"bootstrap.servers": west.bootstrap, "group.id": active, "enable.auto.commit": False})
    member.subscribe([target_topic])
    try:
        wait_until(lambda: (member.poll(0.2), member.assignment())[1] != [], 30, 0.1, "active member")
        config = mirror_config(_clusters(east, west), {
            "east->west": {"topics": topic, "groups": f"{free}|{ahead}|{active}", **FAST},
        })
        with BackgroundWorker(config) as bg:
            wait_until(lambda: _mirrored(east, west, topic), 60, 0.5, "topic mirrored")
            expected = _expected_target_offsets(east, west, topic, committed[free])[0]
            assert expected < 15
            wait_until(lambda: _target_group(west, free) == {ttp: GroupOffset(expected)}, 30, 0.5,
                       "free group synced")
            cps = bg.worker.flows["east->west"].checkpoints
            assert cps is not None
            rounds = cps.metrics.skipped_active_groups
            wait_until(lambda: cps.metrics.skipped_active_groups >= rounds + 1, 10, 0.2,
                       "one more sync round")
            # the member's group was left alone; the group already further ahead was not moved back
            assert _target_group(west, active) == {}
            assert _target_group(west, ahead) == {ttp: GroupOffset(15, "mine")}
            # once the last member left, the group is inactive and gets the translated offset
            member.close()
            member = None
            wait_until(lambda: _target_group(west, active) == {ttp: GroupOffset(expected)}, 30, 0.5,
                       "active group synced after its member left")
    finally:
        if member is not None:
            member.close()


# ------------------------------------------------------------------------------------ CLI


def _cli(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from mm2py.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_failover_cli_translates_and_applies(east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> None:
    topic = create_topic(east.bootstrap, unique("fo"), partitions=2)
    _seed(east.bootstrap, topic, 2, rounds=2)
    checkpointed, direct = unique("cpd"), unique("direct")
    committed = {
        checkpointed: consume_and_commit(east.bootstrap, checkpointed, topic, {0: 5, 1: 12}),
        direct: consume_and_commit(east.bootstrap, direct, topic, {0: 11}),
    }
    cfg = tmp_path / "mm2.yaml"
    settings = {"topics": topic, "groups": checkpointed, "emit.checkpoints.interval.seconds": 1,
                "refresh.groups.interval.seconds": 1}
    config_file(cfg, _clusters(east, west), {"east->west": settings})
    config = mirror_config(_clusters(east, west), {"east->west": settings})
    target_topic = f"east.{topic}"
    with BackgroundWorker(config):
        wait_until(lambda: _mirrored(east, west, topic), 60, 0.5, "topic mirrored")
        want = _expected_target_offsets(east, west, topic, committed[checkpointed])
        wait_until(lambda: {cp.topic_partition.partition: cp.downstream_offset for cp in _checkpoints(west)
                            if cp.group == checkpointed} == want, 30, 0.5, "checkpoints")
    want_direct = _expected_target_offsets(east, west, topic, committed[direct])

    code, out, err = _cli("offsets", "translate", "-c", str(cfg), "--flow", "east->west",
                          "--group", checkpointed, "--group", direct, "--json")
    assert code == 0, err
    rows = {(r["group"], r["partition"]): r for r in json.loads(out)}
    assert {k: (r["target_offset"], r["via"]) for k, r in rows.items()} == {
        **{(checkpointed, p): (o, "checkpoint") for p, o in want.items()},
        (direct, 0): (want_direct[0], "offset-syncs"),
    }
    assert {r["target_topic"] for r in rows.values()} == {target_topic}
    assert rows[(checkpointed, 1)]["source_offset"] == committed[checkpointed][1]

    code, out, _ = _cli("offsets", "translate", "-c", str(cfg), "--flow", "east->west", "--group", direct)
    assert code == 0 and target_topic in out and str(want_direct[0]) in out  # the table

    # dry run: prints the plan, changes nothing
    code, out, err = _cli("offsets", "apply", "-c", str(cfg), "--flow", "east->west", "--group", direct)
    assert code == 0, err
    assert "dry run" in out and _target_group(west, direct) == {}
    code, out, err = _cli("offsets", "apply", "-c", str(cfg), "--flow", "east->west", "--group", direct,
                          "--execute")
    assert code == 0, err
    assert _target_group(west, direct) == {TopicPartition(target_topic, 0): GroupOffset(want_direct[0])}

    # an active group on the target is refused
    member = Consumer({"bootstrap.servers": west.bootstrap, "group.id": checkpointed})
    member.subscribe([target_topic])
    try:
        wait_until(lambda: (member.poll(0.2), member.assignment())[1] != [], 30, 0.1, "active member")
        code, _, err = _cli("offsets", "apply", "-c", str(cfg), "--flow", "east->west",
                            "--group", checkpointed, "--execute")
        assert code == 2 and "active" in err and "Traceback" not in err
    finally:
        member.close()
    assert _target_group(west, checkpointed) == {}

    # the source lost: the checkpoints on the target still answer
    lost = tmp_path / "lost.json"
    lost.write_text(cfg.read_text().replace(east.bootstrap, "127.0.0.1:1"))
    code, out, err = _cli("offsets", "translate", "-c", str(lost), "--flow", "east->west",
                          "--group", checkpointed, "--json", "--timeout", "2")
    assert code == 0, err
    assert {r["partition"]: (r["target_offset"], r["via"]) for r in json.loads(out)} == {
        p: (o, "checkpoint") for p, o in want.items()}
    assert "cluster 'east'" in err and "checkpoints on 'west' only" in err
    code, _, err = _cli("offsets", "translate", "-c", str(lost), "--flow", "east->west",
                        "--group", direct, "--timeout", "2")
    assert code == 2 and "unknown group" in err and "'east' is unreachable" in err

    # bad input: one line, exit code 2
    for args, needle in [
        (("--flow", "east->nowhere", "--group", direct), "no flow"),
        (("--flow", "east->west", "--group", unique("nobody")), "unknown group"),
    ]:
        code, out, err = _cli("offsets", "translate", "-c", str(cfg), *args)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
