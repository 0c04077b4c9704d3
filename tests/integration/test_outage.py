"""A target cluster that goes away and comes back: the flow waits, then loses and duplicates nothing.

The producer sends its unacknowledged batches again by itself until its retry time-out
(``delivery.timeout.ms``, 120 s): an outage shorter than that never reaches the task.

The target is the session's ``west``, stopped and started again in the test (its data directory
kept, as a broker restart keeps it); it is running again whatever the test's outcome.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import (
    BackgroundWorker,
    by_partition,
    create_topic,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    total,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def bounced_west(west: KafkaCluster) -> Iterator[KafkaCluster]:
    """``west``, which the test may stop; started again after it."""
    yield west
    west.start()


def test_target_outage_mid_stream(east: KafkaCluster, bounced_west: KafkaCluster) -> None:
    src, dst = east, bounced_west
    topic = create_topic(src.bootstrap, unique("outage"), partitions=2)
    config = mirror_config(
        {"east": src.bootstrap, "west": dst.bootstrap},
        {"east->west": {"topics": topic, "admin.timeout.ms": 5000}},
    )
    target = f"east.{topic}"
    produce_records(src.bootstrap, topic, make_records(3000, tag="before"))
    with BackgroundWorker(config) as bg:
        wait_until(lambda: total(dst.bootstrap, target) == 3000, 60, 0.2, "first part")
        tasks = bg.worker.flows["east->west"].tasks
        runner = tasks[0]
        wait_until(lambda: runner.metrics.records == 3000, 30, 0.1, "the first part acknowledged")
        dst.stop()
        produce_records(src.bootstrap, topic, make_records(3000, tag="during"))
        # the target is down: nothing more is acknowledged, and the producer keeps sending its
        # batches again by itself (the task sees no failure: it neither fails nor is replaced)
        time.sleep(5)
        assert runner.metrics.records == 3000, "acknowledged by a stopped target"
        assert runner.metrics.sink_failures == 0 and runner.state == "RUNNING" and tasks[0] is runner
        dst.start()
        produce_records(src.bootstrap, topic, make_records(3000, tag="after"))
        wait_until(lambda: total(dst.bootstrap, target) >= 9000, 120, 0.2, "all")
        assert runner.state == "RUNNING" and tasks[0] is runner, runner.trace
        assert runner.metrics.sink_failures == 0, "the outage reached the task"
    got, sent = read_all(dst.bootstrap, target), read_all(src.bootstrap, topic)
    assert len(sent) == 9000
    # same records, same order per partition: nothing lost, nothing written twice
    assert by_partition(got) == by_partition(sent)
