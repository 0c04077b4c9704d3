"""TopicTail, the incremental reader of the checkpoint connector's internal topics, on a real broker:
paused between catch-ups (no fetch while nobody reads), it still hands over every record once, in
order, whatever was appended while it was paused."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.kafka_local import KafkaCluster
from mm2py.stores import topic_tail
from mm2py.stores.topic_tail import TopicTail, bounds, bounds_of
from tests.support.brokers import admin, create_topic, make_records, produce_records, unique

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


def test_the_bounds_of_partitions_of_several_topics_come_in_one_call(west: KafkaCluster) -> None:
    """``bounds_of`` (the sync history's log starts: every topic's partitions at once, not two
    requests per topic) answers each partition's (log start, end) as ``bounds`` does per topic."""
    a = create_topic(west.bootstrap, unique("bounds-a"), 2)
    b = create_topic(west.bootstrap, unique("bounds-b"), 1)
    produce_records(west.bootstrap, a, make_records(5, partition=0) + make_records(3, partition=1))
    produce_records(west.bootstrap, b, make_records(4, partition=0))
    client = admin(west.bootstrap)  # alive until its futures are done
    for f in client.delete_records([CKTopicPartition(a, 0, 2)]).values():
        f.result(30)  # the log of a-0 now starts at 2
    consumer = Consumer({"bootstrap.servers": west.bootstrap, "group.id": unique("bounds")})
    try:
        got = bounds_of(consumer, [(a, 0), (a, 1), (b, 0)], 30)
        assert got == {(a, 0): (2, 5), (a, 1): (0, 3), (b, 0): (0, 4)}
        assert bounds(consumer, a, [1, 0], 30) == {0: (2, 5), 1: (0, 3)}
    finally:
        consumer.close()


def test_bounds_and_log_starts_asked_in_chunks_answer_every_partition(
    west: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BOUNDS_CHUNK: librdkafka's offsets_for_times costs the square of its partitions, so they are
    asked a chunk at a time; every partition still gets its own answer, across chunk edges and
    topics (a chunk of 3 over 2 topics of 4 and 3 partitions: chunks 3, 3 and 1)."""
    monkeypatch.setattr(topic_tail, "BOUNDS_CHUNK", 3)
    a = create_topic(west.bootstrap, unique("chunks-a"), 4)
    b = create_topic(west.bootstrap, unique("chunks-b"), 3)
    counts = {(a, 0): 5, (a, 1): 1, (a, 2): 0, (a, 3): 7, (b, 0): 2, (b, 1): 6, (b, 2): 4}
    for (t, p), n in counts.items():
        if n:
            produce_records(west.bootstrap, t, make_records(n, partition=p, tag=f"{t[-6:]}{p}"))
    client = admin(west.bootstrap)  # alive until its futures are done
    starts = {(a, 3): 6, (b, 1): 2, (b, 2): 4}  # in the first, the second and the third chunk
    for f in client.delete_records([CKTopicPartition(t, p, o) for (t, p), o in starts.items()]).values():
        f.result(30)
    consumer = Consumer({"bootstrap.servers": west.bootstrap, "group.id": unique("chunks")})
    asked = list(counts)
    try:
        assert topic_tail.log_starts_of(consumer, asked, 30) == {tp: starts.get(tp, 0) for tp in asked}
        assert topic_tail.bounds_of(consumer, asked, 30) == {
            tp: (starts.get(tp, 0), n) for tp, n in counts.items()}
    finally:
        consumer.close()
