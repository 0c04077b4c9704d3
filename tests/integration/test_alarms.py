"""A running flow's alarms on real brokers (mm2py/engine/losses.py): records another producer writes
straight into the remote topic are noticed at the mirror's next batch, named with their target
offsets and counted (``skip``: the mirror goes on, every source record still once and in order), or
stop the task for good (``fail``: it stays FAILED, and is not restarted behind the operator's back)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from mm2py.engine.losses import Alarm
from mm2py.kafka_local import KafkaCluster
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
        client = AdminClient({"bootstrap.servers": east.bootstrap})  # must outlive its futures
        client.delete_topics([topic])[topic].result(30)
        wait_until(lambda: topic not in topic_names(east.bootstrap), 30, 0.1, "the topic deleted")

        def created_again() -> bool:
            try:
                create_topic(east.bootstrap, topic)
            except KafkaException as exc:  # the deletion still under way on the broker
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                return False
            return True

        wait_until(created_again, 30, 0.2, "the topic created again")
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
