"""A target cluster that goes away and comes back: the flow waits, then loses and duplicates nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from conftest import RUN_DIR
from helpers import (
    BackgroundWorker,
    by_partition,
    create_topic,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    unique,
    wait_until,
)

from mm2py.kafka_local import KafkaCluster, start_all

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[KafkaCluster, KafkaCluster]]:
    src = KafkaCluster.create("outage-src", RUN_DIR / "outage-src")
    dst = KafkaCluster.create("outage-dst", RUN_DIR / "outage-dst")
    try:
        start_all([src, dst])
        yield src, dst
    finally:
        src.stop()
        dst.stop()


def test_target_outage_mid_stream(pair: tuple[KafkaCluster, KafkaCluster]) -> None:
    src, dst = pair
    topic = create_topic(src.bootstrap, unique("outage"), partitions=2)
    config = mirror_config(
        {"src": src.bootstrap, "dst": dst.bootstrap},
        {"src->dst": {"topics": topic, "admin.timeout.ms": 5000}},
    )
    target = f"src.{topic}"
    produce_records(src.bootstrap, topic, make_records(3000, tag="before"))
    with BackgroundWorker(config) as bg:
        wait_until(lambda: len(read_all(dst.bootstrap, target, timeout=10)) == 3000, 60, 0.5, "first part")
        dst.stop()
        produce_records(src.bootstrap, topic, make_records(3000, tag="during"))
        time.sleep(5)  # the task retries against a dead target
        runner = bg.worker.flows["src->dst"].tasks[0]
        assert runner.state == "RUNNING", runner.trace
        dst.start()
        produce_records(src.bootstrap, topic, make_records(3000, tag="after"))
        wait_until(lambda: len(read_all(dst.bootstrap, target, timeout=10)) >= 9000, 120, 1, "all")
        time.sleep(1)
        assert runner.state == "RUNNING", runner.trace
    got, sent = read_all(dst.bootstrap, target), read_all(src.bootstrap, topic)
    assert len(sent) == 9000
    # same records, same order per partition: nothing lost, nothing written twice
    assert by_partition(got) == by_partition(sent)
