"""TopicTail, the incremental reader of the checkpoint connector's internal topics, on a real broker:
paused between catch-ups (no fetch while nobody reads), it still hands over every record once, in
order, whatever was appended while it was paused."""

from __future__ import annotations

import pytest

from mm2py.kafka_local import KafkaCluster
from mm2py.stores.topic_tail import TopicTail
from tests.support.brokers import create_topic, make_records, produce_records, unique

pytestmark = pytest.mark.integration


def test_every_record_once_across_paused_catch_ups(west: KafkaCluster) -> None:
    topic = create_topic(west.bootstrap, unique("tail"), 2)
    seen: list[tuple[bytes | None, bytes | None]] = []
    tail = TopicTail({"bootstrap.servers": west.bootstrap}, topic, lambda k, v: seen.append((k, v)))
    sent = []
    try:
        for round_ in range(4):
            batch = [r for p in (0, 1) for r in make_records(15, partition=p, tag=f"r{round_}p{p}")]
            produce_records(west.bootstrap, topic, batch)
            sent += batch
            assert tail.catch_up(timeout=30)
            assert tail.records == len(sent)  # nothing missed, nothing handed over twice
        assert tail.catch_up(timeout=30) and tail.records == len(sent)  # nothing new: nothing
    finally:
        tail.close()
    for p in (0, 1):
        got = [kv for kv in seen if kv[1] is not None and f"p{p}-value".encode() in kv[1]]
        want = [(r.key, r.value) for r in sent if r.partition == p and r.value is not None]
        assert got == want  # in order per partition
