"""Records the target deletes by its own retention while the source still holds them (issue 46
item 0), on real brokers: a backfill of year-old records, mirrored with topic config sync off.

- A remote topic mm2py creates takes the source topic's settings (``retention.ms=-1``), so every
  record is still on the target after its segments rolled and the broker's retention check ran.
- A remote topic the platform team made beforehand with the broker's 7-day default deletes them as
  soon as their segments roll: the ``target.retention`` alarm names the remote partition, the
  offsets gone that the source still holds, and the remote topic's setting that did it, in the
  flow's status, ``/metrics`` and a warning; the mirror goes on (no task alarm, no restart).

The harness's brokers check retention every 2 s (``mm2py.kafka_local.layout``), as production
brokers do every 5 minutes."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import (
    BackgroundWorker,
    Rec,
    by_partition,
    create_topic,
    end_offsets,
    mirror_config,
    produce_records,
    read_all,
    start_offsets,
    unique,
    wait_until,
)
from tests.support.worker_metrics import samples

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000
RECORDS = 40  # per partition: ten minutes apart, a year ago


def _history(tag: str, partition: int) -> list[Rec]:
    year_ago = int(time.time() * 1000) - 365 * 24 * HOUR_MS
    return [Rec(f"{tag}-{i}".encode(), f"{tag}-{i}".encode(), (), year_ago + i * HOUR_MS // 6, partition)
            for i in range(RECORDS)]


def test_records_the_target_deletes_while_the_source_keeps_them_raise_target_retention_with_the_cause(
        east: KafkaCluster, west: KafkaCluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mm2py")
    kept, theirs = unique("kept"), unique("theirs")
    # a segment holds an hour of record time: year-old records ten minutes apart roll one every
    # six records, on the source and on each remote topic alike
    rolls = {"segment.ms": str(HOUR_MS)}
    for topic in (kept, theirs):
        create_topic(east.bootstrap, topic, partitions=2, config={"retention.ms": "-1", **rolls})
    create_topic(west.bootstrap, f"east.{theirs}", partitions=2, config=rolls)  # the broker's 7 days
    for topic in (kept, theirs):
        for p in (0, 1):
            # one record per batch, so the broker can roll between any two
            produce_records(east.bootstrap, topic, _history(f"{topic}-{p}", p), linger_ms=0)

    flows = {"east->west": {"topics": f"{kept},{theirs}", "tasks.max": 1, "sync.topic.configs.enabled": False,
                            "emit.heartbeats.enabled": False, "emit.checkpoints.enabled": False,
                            "mm2py.offset.sync.history.prune.interval.seconds": 1}}
    with BackgroundWorker(mirror_config({"east": east.bootstrap, "west": west.bootstrap}, flows)) as bg:
        took = wait_until(lambda: all(end_offsets(west.bootstrap, f"east.{t}") == {0: RECORDS, 1: RECORDS}
                                      for t in (kept, theirs)), 120, 0.2, "every record on the target")
        wait = 30 + 10 * took
        # the broker's retention deletes the rolled segments of the topic made with its 7 days
        wait_until(lambda: all(s > 0 for s in start_offsets(west.bootstrap, f"east.{theirs}").values()), wait,
                   0.2, "the target's retention to delete year-old segments")
        status: dict[str, Any] = {}

        def alarmed() -> bool:
            status.update(bg.worker.flows["east->west"].status())
            return len(status["target_retention"]) == 2

        wait_until(alarmed, wait, 0.2, "target.retention for both partitions in the flow's status")
        starts = start_offsets(west.bootstrap, f"east.{theirs}")
        for entry in status["target_retention"]:
            p = int(entry["partition"].rsplit("-", 1)[1])
            assert entry["partition"] == f"{theirs}-{p}"
            assert entry["remote_partition"] == f"east.{theirs}-{p}"
            assert entry["source_log_start"] == 0 and entry["expected_target_start"] == 0
            assert 0 < entry["target_log_start"] <= starts[p]
            assert entry["offsets"] == entry["target_log_start"]
            assert "retention.ms=604800000 (the source topic's: -1)" in entry["cause"], entry
        warned = [r.getMessage() for r in caplog.records
                  if r.levelno == logging.WARNING and "target.retention" in r.getMessage()]
        assert any(f"east.{theirs}-0" in m and "retention.ms=604800000" in m for m in warned), warned
        flow = (("flow", "east->west"),)
        assert samples(bg.worker, "mm2py_alarm_target_retention_total")[flow] >= 2
        lost = samples(bg.worker, "mm2py_target_retention_offsets")
        for p in (0, 1):
            assert 0 < lost[(*flow, ("partition", str(p)), ("topic", theirs))] <= starts[p]
        assert not [k for k in lost if ("topic", kept) in k]
        tasks = status["tasks"]
        assert [(t["state"], t["restarts"]) for t in tasks] == [("RUNNING", 0)]
        assert sum(tasks[0]["alarms"].values()) == 0
    # the remote topic mm2py made keeps the source's retention.ms=-1: the same segments rolled and
    # the same retention check ran, and every record is there once, in order
    assert start_offsets(west.bootstrap, f"east.{kept}") == {0: 0, 1: 0}
    mirrored = by_partition(read_all(west.bootstrap, f"east.{kept}"))
    assert mirrored == by_partition(read_all(east.bootstrap, kept))
    assert sum(map(len, mirrored.values())) == 2 * RECORDS
