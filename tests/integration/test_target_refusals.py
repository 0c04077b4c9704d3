"""A target that refuses some partitions' records (issue 46 item 2), on real brokers: keyless
records into a compacted remote topic (INVALID_RECORD) and records older than a remote topic takes
(INVALID_TIMESTAMP), in one task. Each refused partition is named in the status, the log and
``/metrics`` with its cause and what to change; it rests alone while its sibling flows; once the
remote topic's setting is changed it resumes by itself, exactly where it stopped: every record once
and in order. Then a foreign record written into an idle remote partition is named within the
flow's refresh interval, with no batch of the mirror's there (item 4)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import (
    BASE_TS,
    BackgroundWorker,
    Rec,
    by_partition,
    create_topic,
    end_offsets,
    mirror_config,
    produce_records,
    read_all,
    unique,
    wait_until,
)
from tests.support.worker_metrics import partitions_flagged

pytestmark = pytest.mark.integration


def _set(bootstrap: str, topic: str, name: str, value: str) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    for future in client.incremental_alter_configs([resource]).values():
        future.result(30)


def _recs(tag: str, n: int, partition: int, *, keyed: bool = True, ts: int = BASE_TS) -> list[Rec]:
    return [Rec(f"{tag}-{i}".encode() if keyed else None, f"{tag}-{i}".encode(), (), ts + i, partition)
            for i in range(n)]


def _refused(bg: BackgroundWorker) -> dict[str, dict[str, Any]]:
    tasks = bg.worker.flows["east->west"].status()["tasks"]
    return {r["partition"]: r for t in tasks for r in t["refused_partitions"]}


def _alarms(bg: BackgroundWorker) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in bg.worker.flows["east->west"].status()["tasks"]:
        for name, n in t["alarms"].items():
            out[name] = out.get(name, 0) + n
    return out


def _refused_metric(bg: BackgroundWorker) -> set[tuple[str, str, str]]:
    return partitions_flagged(bg.worker, "mm2py_partition_refused")


def test_refused_partitions_are_named_wait_alone_and_resume_by_themselves_once_fixed(
        east: KafkaCluster, west: KafkaCluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mm2py.engine.task")
    keys, times = unique("keys"), unique("times")
    create_topic(east.bootstrap, keys, partitions=2)
    create_topic(east.bootstrap, times, partitions=1)
    # the platform team's remote topics, unlike their sources (their settings not synced)
    create_topic(west.bootstrap, f"east.{keys}", partitions=2, config={"cleanup.policy": "compact"})
    create_topic(west.bootstrap, f"east.{times}", partitions=1,
                 config={"message.timestamp.before.max.ms": "60000"})  # BASE_TS is an hour old
    produce_records(east.bootstrap, keys, [*_recs("keyless", 100, 0, keyed=False), *_recs("keyed", 100, 1)])
    produce_records(east.bootstrap, times, _recs("old", 50, 0))

    flows = {"east->west": {"topics": f"{keys},{times}", "tasks.max": 1, "sync.topic.configs.enabled": False,
                            "refresh.topics.interval.seconds": 5}}
    with BackgroundWorker(mirror_config({"east": east.bootstrap, "west": west.bootstrap}, flows)) as bg:
        took = wait_until(lambda: len(_refused(bg)) == 2, 120, 0.2, "both refusals named in the status")
        refused = _refused(bg)
        assert refused[f"{keys}-0"]["cause"] == "INVALID_RECORD"
        assert "cleanup.policy" in refused[f"{keys}-0"]["change"]
        assert refused[f"{keys}-0"]["target_partition"] == f"east.{keys}-0"
        assert refused[f"{times}-0"]["cause"] == "INVALID_TIMESTAMP"
        assert "message.timestamp" in refused[f"{times}-0"]["meaning"]
        assert _refused_metric(bg) == {(keys, "0", "INVALID_RECORD"), (times, "0", "INVALID_TIMESTAMP")}
        # both causes in the log, each line of its own (the throttle keys by cause and partition)
        lines = [r.getMessage() for r in caplog.records if "the target refuses" in r.getMessage()]
        assert any(f"east.{keys}-0 (INVALID_RECORD)" in line for line in lines), lines
        assert any(f"east.{times}-0 (INVALID_TIMESTAMP)" in line for line in lines), lines

        # the sibling in the same task flows, now and later, while its neighbour rests
        wait = 30 + 10 * took
        wait_until(lambda: end_offsets(west.bootstrap, f"east.{keys}").get(1) == 100, wait, 0.2,
                   "the sibling")
        produce_records(east.bootstrap, keys, _recs("later", 100, 1))
        wait_until(lambda: end_offsets(west.bootstrap, f"east.{keys}").get(1) == 200, wait, 0.2,
                   "the sibling's later records")
        assert end_offsets(west.bootstrap, f"east.{keys}").get(0) == 0
        assert set(_refused(bg)) == {f"{keys}-0", f"{times}-0"}

        # fixed on the target: each partition resumes by itself, exactly where it stopped
        _set(west.bootstrap, f"east.{keys}", "cleanup.policy", "delete")
        wait_until(lambda: f"{keys}-0" not in _refused(bg), wait, 0.2, "the keyless partition taken again")
        _set(west.bootstrap, f"east.{times}", "message.timestamp.before.max.ms", str(2**62))
        wait_until(lambda: not _refused(bg), wait, 0.2, "the old records taken again")
        wait_until(lambda: end_offsets(west.bootstrap, f"east.{keys}").get(0) == 100
                   and end_offsets(west.bootstrap, f"east.{times}").get(0) == 50, wait, 0.2, "everything")
        assert _refused_metric(bg) == set()
        for topic in (keys, times):
            mirrored = by_partition(read_all(west.bootstrap, f"east.{topic}"))
            assert mirrored == by_partition(read_all(east.bootstrap, topic))
        assert any("taken by the target again" in r.getMessage() for r in caplog.records)

        # another producer writes into the idle remote partition: named by the idle check alone
        produce_records(west.bootstrap, f"east.{times}", [Rec(b"foreign", b"x", (), BASE_TS, 0)])
        named = wait_until(lambda: _alarms(bg).get("target.foreign", 0) == 1, wait, 0.2, "the foreign write")
        tasks = bg.worker.flows["east->west"].status()["tasks"]
    assert [t["state"] for t in tasks] == ["RUNNING"] and tasks[0]["restarts"] == 0
    [alarm] = [a for a in tasks[0]["recent_alarms"] if "did not write" in a]
    assert f"{times}-0" in alarm and "idle remote partition ends at 51" in alarm and "50..50 (1)" in alarm
    # within the 5 s interval and the time one step of this machine took (not one batch needed)
    assert named < 5 + 2 * took + 5, (named, took)
