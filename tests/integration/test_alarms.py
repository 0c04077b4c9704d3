"""A running flow's alarms on real brokers (mm2py/engine/losses.py): records another producer writes
straight into the remote topic are noticed at the mirror's next batch, named with their target
offsets and counted (``skip``: the mirror goes on, every source record still once and in order), or
stop the task for good (``fail``: it stays FAILED, and is not restarted behind the operator's back)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient

from mm2py.engine.losses import Alarm
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.types import TopicPartition
from tests.support.brokers import (
    BackgroundWorker,
    create_topic,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    topic_names,
    total,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration


def _foreign(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, f"foreign-{i}".encode(), partition=0)
    assert p.flush(30) == 0


def test_records_written_into_the_remote_topic_by_another_producer_are_named_and_the_mirror_goes_on(
        east: KafkaCluster, west: KafkaCluster) -> None:
    topic = create_topic(east.bootstrap, unique("alarm-skip"))
    remote = f"east.{topic}"
    produce_records(east.bootstrap, topic, make_records(50, tag="a"))
    clusters = {"east": east.bootstrap, "west": west.bootstrap}
    config = mirror_config(clusters, {"east->west": {"topics": topic}})
    with BackgroundWorker(config) as bg:
        wait_until(lambda: total(west.bootstrap, remote) == 50, 60, 0.1, "the first records")
        _foreign(west.bootstrap, remote, 3)
        produce_records(east.bootstrap, topic, make_records(50, tag="b"))
        wait_until(lambda: total(west.bootstrap, remote) == 103, 60, 0.1, "the next records")
        (task,) = bg.worker.flows["east->west"].tasks.values()
        wait_until(lambda: task.metrics.audit_foreign_records == 1, 30, 0.1, "the alarm")
        (event,) = task.losses.recent
        assert (event.alarm, event.tp.topic) == (Alarm.FOREIGN_RECORDS, topic)
        assert (event.expected, event.found) == (50, 53)  # target offsets 50..52 are someone else's
        assert task.state == "RUNNING" and task.metrics.audit_verified_batches >= 1
    # nothing mixed: the source's records once and in order, the three foreign ones where they were written
    values = [r.value for r in read_all(west.bootstrap, remote)]
    source = [r.value for r in read_all(east.bootstrap, topic)]
    assert values[:50] == source[:50] and values[53:] == source[50:]
    assert values[50:53] == [b"foreign-0", b"foreign-1", b"foreign-2"]


def test_with_policy_fail_foreign_records_stop_the_task_until_the_flow_is_restarted(
        east: KafkaCluster, west: KafkaCluster) -> None:
    topic = create_topic(east.bootstrap, unique("alarm-fail"))
    remote = f"east.{topic}"
    produce_records(east.bootstrap, topic, make_records(20, tag="a"))
    config = mirror_config({"east": east.bootstrap, "west": west.bootstrap},
                           {"east->west": {"topics": topic, "mm2py.alarm.target.foreign": "fail"}})
    with BackgroundWorker(config) as bg:
        wait_until(lambda: total(west.bootstrap, remote) == 20, 60, 0.1, "the first records")
        _foreign(west.bootstrap, remote, 1)
        produce_records(east.bootstrap, topic, make_records(20, tag="b"))
        flow = bg.worker.flows["east->west"]
        wait_until(lambda: next(iter(flow.tasks.values())).state == "FAILED", 60, 0.1, "the task stopped")
        (task,) = flow.tasks.values()
        assert "target.foreign (policy fail)" in (task.trace or "") and task.metrics.restarts == 0
        # not restarted by itself: the task's runner is over, the task stays FAILED
        wait_until(lambda: flow._running[0].done(), 30, 0.1, "the task's runner to end")
        assert next(iter(flow.tasks.values())) is task and task.state == "FAILED"
    values = [r.value for r in read_all(west.bootstrap, remote)]
    source = [r.value for r in read_all(east.bootstrap, topic)]
    assert values[:20] == source[:20] and values[20] == b"foreign-0"


def test_a_source_topic_deleted_and_created_again_stops_the_task_before_any_new_record_is_mirrored(
        east: KafkaCluster, west: KafkaCluster) -> None:
    """The new topic already holds more offsets than the mirror had reached, so its offsets alone
    would let the mirror go on from its old position into the new topic's records: its new topic
    id says otherwise (``source.recreated``, ``fail`` by default)."""
    topic = create_topic(east.bootstrap, unique("alarm-recreated"))
    remote = f"east.{topic}"
    produce_records(east.bootstrap, topic, make_records(30, tag="old"))
    clusters = {"east": east.bootstrap, "west": west.bootstrap}
    with BackgroundWorker(mirror_config(clusters, {"east->west": {"topics": topic}})) as bg:
        wait_until(lambda: total(west.bootstrap, remote) == 30, 60, 0.1, "the old topic's records")
        _recreate(east.bootstrap, topic)
        produce_records(east.bootstrap, topic, make_records(40, tag="new"))
        flow = bg.worker.flows["east->west"]
        wait_until(lambda: next(iter(flow.tasks.values())).state == "FAILED", 60, 0.1, "the alarm")
        (task,) = flow.tasks.values()
        assert "source.recreated (policy fail)" in (task.trace or ""), task.trace
        assert task.metrics.audit_source_recreated == 1
        wait_until(lambda: flow._running[0].done(), 30, 0.1, "the task's runner to end")
    # nothing of the new topic reached the target
    values = [r.value for r in read_all(west.bootstrap, remote)]
    assert len(values) == 30 and all(v is None or v.startswith(b"old-") for v in values), values[-3:]


REFRESH = 5  # seconds: refresh.topics.interval.seconds of the flows below; an alarm is due within two


def _halt(bg: BackgroundWorker, state: str = "STOPPED") -> None:
    bg.call(lambda: bg.worker.halt_flow("east->west", state))


def _resume(bg: BackgroundWorker) -> float:
    """Resume the flow; the wall-clock time it was resumed at (its tasks then start)."""
    at = time.time()
    bg.call(lambda: bg.worker.resume_flow("east->west"))
    return at


def _task(bg: BackgroundWorker) -> Any:
    (task,) = bg.worker.flows["east->west"].tasks.values()
    return task


def _failed_with(bg: BackgroundWorker, alarm: Alarm, since: float) -> Any:
    """The flow's one task, once it stopped with ``alarm`` under ``fail``, no later than two refresh
    intervals after ``since``."""
    wait_until(lambda: _task(bg).state == "FAILED", 60, 0.1, f"{alarm.value}")
    task = _task(bg)
    assert f"{alarm.value} (policy fail)" in (task.trace or ""), task.trace
    (event,) = [e for e in task.losses.recent if e.alarm is alarm]
    assert event.at - since <= 2 * REFRESH, f"{alarm.value} after {event.at - since:.1f}s"
    assert bg.worker.flows["east->west"].status()["tasks"][0]["alarms"][alarm.value] == 1
    return task


def _recreate(bootstrap: str, topic: str) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    client.delete_topics([topic])[topic].result(30)
    wait_until(lambda: topic not in topic_names(bootstrap), 30, 0.1, "the topic deleted")

    def created_again() -> bool:
        try:
            create_topic(bootstrap, topic)
        except KafkaException as exc:  # the deletion still under way on the broker
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            return False
        return True

    wait_until(created_again, 30, 0.2, "the topic created again")


def test_records_deleted_ahead_of_a_paused_flow_are_named_and_skipped_and_a_remote_topic_created_again_fails(
        east: KafkaCluster, west: KafkaCluster) -> None:
    """While the flow is paused, DeleteRecords on the source passes its position: ``source.deleted``
    (``skip``) names the offsets lost and the mirror goes on from the new log start. Then the remote
    topic is deleted and created again under the running flow, and deleted while it is stopped:
    ``target.truncated`` (``fail``) each time, the first once the target acknowledged the next batch
    at 0, the second before the task writes anything into the new remote topic."""
    topic = create_topic(east.bootstrap, unique("alarm-deleted"))
    remote = f"east.{topic}"
    first, later = make_records(20, tag="a"), make_records(30, tag="b")
    produce_records(east.bootstrap, topic, first)
    clusters = {"east": east.bootstrap, "west": west.bootstrap}
    flows = {"east->west": {"topics": topic, "refresh.topics.interval.seconds": REFRESH}}
    with BackgroundWorker(mirror_config(clusters, flows)) as bg:
        wait_until(lambda: total(west.bootstrap, remote) == 20, 60, 0.1, "the first records")
        _halt(bg, "PAUSED")
        produce_records(east.bootstrap, topic, later)
        client = AdminClient({"bootstrap.servers": east.bootstrap})  # must outlive its futures
        for future in client.delete_records([KafkaPartition(topic, 0, 40)]).values():
            assert future.result(30).low_watermark == 40  # offsets 20..39 never mirrored
        since = _resume(bg)
        wait_until(lambda: total(west.bootstrap, remote) == 30, 60, 0.1, "mirrored from the new log start")
        task = _task(bg)
        (event,) = task.losses.recent
        assert (event.alarm, event.expected, event.found) == (Alarm.SOURCE_DELETED, 20, 40)
        assert event.at - since <= 2 * REFRESH, f"source.deleted after {event.at - since:.1f}s"
        assert task.metrics.audit_source_deleted == 1 and task.metrics.offsets_lost_to_retention == 20
        status = bg.worker.flows["east->west"].status()["tasks"][0]
        assert status["alarms"] == {"source.deleted": 1} and status["state"] == "RUNNING"
        assert "source offsets 20..39 (20) were deleted before they were mirrored" in (
            status["recent_alarms"][0])
        # nothing mixed: the first records, then the source's from its new log start
        values = [r.value for r in read_all(west.bootstrap, remote)]
        assert values == [r.value for r in first] + [r.value for r in later[20:]]

        # under the running flow the remote topic is deleted and created again: the next batch lands
        # at 0, the task stops once it is acknowledged
        since = time.time()
        _recreate(west.bootstrap, remote)
        again = make_records(5, tag="c")
        produce_records(east.bootstrap, topic, again)
        _failed_with(bg, Alarm.TARGET_TRUNCATED, since)
        assert [r.value for r in read_all(west.bootstrap, remote)] == [r.value for r in again]

        # while the flow is stopped the remote topic is deleted (the flow's start creates it again):
        # the task stops before writing anything into it
        _halt(bg)
        client = AdminClient({"bootstrap.servers": west.bootstrap})  # must outlive its futures
        client.delete_topics([remote])[remote].result(30)
        wait_until(lambda: remote not in topic_names(west.bootstrap), 30, 0.1, "the remote topic deleted")
        produce_records(east.bootstrap, topic, make_records(5, tag="d"))
        _failed_with(bg, Alarm.TARGET_TRUNCATED, _resume(bg))
        assert _task(bg).metrics.records == 0
    assert total(west.bootstrap, remote) == 0  # the new remote topic got nothing


def test_a_source_topic_created_again_with_fewer_records_while_the_flow_was_stopped_is_named(
        east: KafkaCluster, west: KafkaCluster) -> None:
    """The source topic is deleted and created again while the flow is stopped, then filled to fewer
    records than were mirrored: its log now ends below the mirror's position. The position stored
    with the old topic's id says ``source.recreated``; the same position as MirrorMaker 2 or an
    older mm2py stored it (no topic id) says ``source.truncated`` from the offsets alone: the cheap
    stand-in for a log truncated by an unclean leader election, which the harness's brokers (Kafka
    4.1, KRaft) do not reproduce cheaply. Both ``fail``: nothing of the new topic is mirrored."""
    from mm2py.protocol.connect_offsets import Position
    from mm2py.rdkafka.admin import ClusterAdmin
    from mm2py.stores.positions import PositionStore

    topic = create_topic(east.bootstrap, unique("alarm-truncated"))
    remote = f"east.{topic}"
    produce_records(east.bootstrap, topic, make_records(30, tag="old"))
    clusters = {"east": east.bootstrap, "west": west.bootstrap}
    flows = {"east->west": {"topics": topic, "refresh.topics.interval.seconds": REFRESH}}
    with BackgroundWorker(mirror_config(clusters, flows)) as bg:
        wait_until(lambda: total(west.bootstrap, remote) == 30, 60, 0.1, "the old topic's records")
        _halt(bg)
        _recreate(east.bootstrap, topic)
        produce_records(east.bootstrap, topic, make_records(10, tag="new"))
        task = _failed_with(bg, Alarm.SOURCE_RECREATED, _resume(bg))
        assert task.metrics.records == 0

        _halt(bg)  # the position rewritten as MM2 writes it: no topic id, no target end
        store = PositionStore(ClusterAdmin("west", west.bootstrap), "east")
        stored = store.load()[TopicPartition(topic, 0)]
        assert stored.source == 30 and stored.topic_id is not None
        store.commit({TopicPartition(topic, 0): Position(30)})
        store.close()
        task = _failed_with(bg, Alarm.SOURCE_TRUNCATED, _resume(bg))
        (event,) = task.losses.recent
        assert (event.expected, event.found) == (30, 0)  # the log now ends at 10, starts at 0
    values = [r.value for r in read_all(west.bootstrap, remote)]
    assert len(values) == 30 and all(v is None or v.startswith(b"old-") for v in values), values[-3:]
