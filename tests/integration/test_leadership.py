"""Leadership changes under a running mirror (a 3-broker cluster): nothing lost, nothing twice, in order.

The target's partition leader is killed while batches are being produced to it (NOT_LEADER, a new
leader, the idempotent producer's sequences carried over), and the source's while batches are being
fetched from it (the fetcher follows the new leader).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import (
    BackgroundWorker,
    by_partition,
    create_topic,
    end_offsets,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    total,
    unique,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

PARTITIONS = 3


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return int(md.topics[topic].partitions[partition].leader)


class Stream:
    """Produces lz4 batches of 500 records, spread over the partitions, ~0.1 s apart, until
    :attr:`stop` is set (a stream that cannot run out before the test's event)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        #: batches produced and acknowledged so far
        self.sent = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def total(self) -> int:
        return self.sent * 500

    def _run(self) -> None:
        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "compression.type": "lz4",
                                 "linger.ms": 5, "enable.idempotence": True, "acks": "all"})
            while not self.stop.is_set():
                records = make_records(500, partition=self.sent % PARTITIONS, tag=f"s{self.sent}")
                for r in records:
                    headers = list(r.headers) if r.headers else None
                    producer.produce(self.topic, r.value, r.key, partition=r.partition,
                                     timestamp=r.timestamp, headers=headers)
                assert producer.flush(60) == 0, "the stream's records were not all acknowledged"
                self.sent += 1
                time.sleep(0.1)
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> Stream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(120)
        if self.error is not None:
            raise self.error


def _assert_exact(src: str, topic: str, dst: str, target: str) -> None:
    sent, got = read_all(src, topic), read_all(dst, target)
    assert len(got) == len(sent), f"{len(got) - len(sent):+d} records on the target"
    assert by_partition(got) == by_partition(sent)  # same records, same order, per partition


def _mirror_through_a_leader_kill(
    src: KafkaCluster, dst: KafkaCluster, trio: KafkaCluster, topic: str, **settings: Any
) -> None:
    """Mirror a stream from ``src`` to ``dst`` and kill, a quarter of the way in, the trio node that
    leads partition 0 of the mirrored topic on whichever side the trio is."""
    names = {"src": src.bootstrap, "dst": dst.bootstrap}
    target = f"src.{topic}"
    watched = (topic if src is trio else target, 0)
    config = mirror_config(names, {"src->dst": {"topics": topic, "tasks.max": 2, "admin.timeout.ms": 10_000}},
                           **settings)
    with BackgroundWorker(config) as bg, Stream(src.bootstrap, topic) as stream:
        # a stream that failed (its producer got no producer id in time: G21 in docs/testing.md)
        # ends the wait at once and says so, rather than as a mirror that copied nothing
        wait_until(lambda: total(dst.bootstrap, target) >= 10 * 500 or stream.error is not None, 90, 0.1,
                   "mirroring")
        assert stream.error is None, f"the source stream failed before the kill: {stream.error!r}"
        killed = _leader(trio.bootstrap, *watched)
        trio.kill_node(killed)
        at_kill = stream.sent
        # as many batches again after the kill, all through the new leader's election
        wait_until(lambda: stream.sent >= at_kill + 10 or stream.error is not None, 120, 0.1,
                   "the stream going on after the kill")
        stream.stop.set()
        stream.thread.join(120)
        assert stream.error is None, stream.error
        wait_until(lambda: total(dst.bootstrap, target) >= stream.total, 120, 0.2, "all mirrored")
        assert _leader(trio.bootstrap, *watched) not in (killed, -1)
        tasks = bg.worker.flows["src->dst"].tasks.values()
        assert all(t.state == "RUNNING" for t in tasks), [t.trace for t in tasks]
    _assert_exact(src.bootstrap, topic, dst.bootstrap, target)


def test_target_leader_lost_mid_stream(east: KafkaCluster, trio: KafkaCluster) -> None:
    topic = create_topic(east.bootstrap, unique("lead-dst"), partitions=PARTITIONS)
    _mirror_through_a_leader_kill(east, trio, trio, topic,
                                  **{"replication.factor": 3, "checkpoints.topic.replication.factor": 3})


def test_source_leader_lost_mid_stream(trio: KafkaCluster, west: KafkaCluster) -> None:
    """Also the harness's own check of the 3-broker cluster: a producer with acks=all goes on
    through the leader's loss, a node that did not lead takes over, and the source holds every
    record once, in order (read back and compared with the target)."""
    assert len(AdminClient({"bootstrap.servers": trio.bootstrap}).list_topics(timeout=10).brokers) == 3
    topic = create_topic(trio.bootstrap, unique("lead-src"), partitions=PARTITIONS, replication_factor=3)
    _mirror_through_a_leader_kill(trio, west, trio, topic, **{"offset-syncs.topic.replication.factor": 3})


def test_a_source_broker_that_stops_answering_holds_up_only_the_partitions_it_leads(
    trio: KafkaCluster, west: KafkaCluster
) -> None:
    """One source broker SIGSTOPped for 5 s while a catch-up runs (tasks.max=4, one fetch session
    per broker for all four tasks): the partitions other brokers lead go on being mirrored
    meanwhile, and the stopped broker's move again soon after its SIGCONT."""
    parts = 6
    topic = create_topic(trio.bootstrap, unique("stop-src"), partitions=parts, replication_factor=1)
    target = f"src.{topic}"
    stopped = _leader(trio.bootstrap, topic, 0)
    theirs = [p for p in range(parts) if _leader(trio.bootstrap, topic, p) == stopped]
    others = [p for p in range(parts) if p not in theirs]
    assert others, "every partition on one broker"
    for p in range(parts):
        produce_records(trio.bootstrap, topic, make_records(100, partition=p, tag=f"a{p}"))
    config = mirror_config({"src": trio.bootstrap, "dst": west.bootstrap},
                           {"src->dst": {"topics": topic, "tasks.max": 4}},
                           **{"offset-syncs.topic.location": "target"})

    def on_target(partitions: list[int]) -> int:
        try:
            ends = end_offsets(west.bootstrap, target)
        except Exception:
            return 0
        return sum(ends.get(p, 0) for p in partitions)

    late: Producer | None = None
    with BackgroundWorker(config) as bg:
        wait_until(lambda: on_target(list(range(parts))) == 100 * parts, 90, 0.1, "the first records")
        trio.pause_node(stopped)
        try:
            # a catch-up on the other brokers' partitions while the stopped one answers nothing
            for p in others:
                produce_records(trio.bootstrap, topic, make_records(2_000, partition=p, tag=f"b{p}"))
            # and records for the stopped broker's partitions, held in the producer until it is back
            late = Producer({"bootstrap.servers": trio.bootstrap, "linger.ms": 5, "acks": "all",
                             "message.timeout.ms": 120_000})
            for p in theirs:
                for r in make_records(50, partition=p, tag=f"c{p}"):
                    late.produce(topic, r.value, r.key, partition=p, timestamp=r.timestamp)
            late.poll(0)
            time.sleep(5.0)  # the scenario: the broker stays stopped for 5 s
            moved = on_target(others) - 100 * len(others)
        finally:
            trio.resume_node(stopped)
        resumed = time.monotonic()
        assert moved > 0, "nothing of the other brokers' partitions was mirrored while one was stopped"
        assert late.flush(60) == 0
        wait_until(lambda: on_target(theirs) == 150 * len(theirs), 60, 0.1, "the stopped broker's partitions")
        back_after = time.monotonic() - resumed
        wait_until(lambda: on_target(others) == 2_100 * len(others), 60, 0.1, "the catch-up")
        runner = bg.worker.flows["src->dst"]
        tasks = runner.tasks.values()
        assert all(t.state == "RUNNING" for t in tasks), [t.trace for t in tasks]
        assert len(tasks) == 4
        shared = runner.builder.shared
        # the four tasks fetched over one session per broker and produced through one mux
        assert set(shared.hub.fetcher.sessions) <= {1, 2, 3}
        assert all(t.source.member is not None for t in tasks)
        assert shared.mux.parts >= shared.mux.sent > 0
    print(f"while stopped: {moved} records of the others' partitions mirrored; "
          f"the stopped broker's partitions complete {back_after:.1f} s after SIGCONT")
    assert back_after < 10, back_after
    _assert_exact(trio.bootstrap, topic, west.bootstrap, target)
