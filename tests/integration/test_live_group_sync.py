"""Live group offset sync against real brokers, under live traffic, intervals at MM2's defaults.

The source is written in transactions, a third of them aborted, so a partition's source and target
offsets drift apart with every transaction marker and aborted record; a translated offset is checked
against where the first record the group had not consumed landed on the target (by its content).
The periodic jobs run at MM2's defaults (checkpoints and group sync every 60 s, groups listed every
600 s): a new group's commits reaching the target within seconds come from the live sync.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.engine.live_groups import as_fetched
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.consumer_offsets import CONSUMER_OFFSETS_TOPIC, OffsetCommit, decode_record
from mm2py.protocol.mm2_records import Checkpoint
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin, GroupOffset
from tests.support.brokers import (
    BackgroundWorker,
    create_topic,
    end_offsets,
    mirror_config,
    read_all,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

PARTITIONS = 2
#: a quiet machine's bound; the live sync typically takes tens of milliseconds here. On a loaded
#: one it is sized from what the test measured (:func:`_waiting`'s ``unit``), up to LIVE_CAP_S
BOUND_S = 10.0
#: never longer: below MM2's 60 s group sync interval, so a pass still shows the live path (and a
#: group made after the flow started is listed again only after 600 s)
LIVE_CAP_S = 45.0


class TransactionalTraffic:
    """Transactions of a few records per partition, every third aborted, until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("live-tx"),
                                  "linger.ms": 5})
        self.topic = topic
        self.stopped = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            self.producer.init_transactions(30)
            n = 0
            while not self.stopped.is_set():
                self.producer.begin_transaction()
                for p in range(PARTITIONS):
                    for i in range(3):
                        self.producer.produce(self.topic, f"tx-{n}-{p}-{i}".encode(), partition=p)
                self.producer.flush(30)
                if n % 3 == 2:
                    self.producer.abort_transaction(30)
                else:
                    self.producer.commit_transaction(30)
                n += 1
                time.sleep(0.02)
        except Exception as exc:  # reported by stop()
            self.errors.append(repr(exc))

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(60)
        assert not self.thread.is_alive() and not self.errors, self.errors

    @contextmanager
    def running(self) -> Iterator[TransactionalTraffic]:
        self.thread.start()
        try:
            yield self
        finally:
            self.stop()


def _target_group(west: KafkaCluster, group: str) -> dict[int, int]:
    got = ClusterAdmin("west", west.bootstrap).group_offsets([group])[group]
    return {tp.partition: o.offset for tp, o in got.items()}


def _commit(east: KafkaCluster, group: str, topic: str, offsets: dict[int, int]) -> float:
    """``group`` (never joining) commits ``offsets`` on the source; returns when (monotonic)."""
    c = Consumer({"bootstrap.servers": east.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[CKTopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        return time.monotonic()
    finally:
        c.close()


def _exact(east: KafkaCluster, west: KafkaCluster, topic: str, committed: list[dict[int, int]]
           ) -> list[dict[int, int]]:
    """For each commit: the target offset of the first committed record at or after each committed
    source offset (found by content), once the traffic and the mirror have gone past them all."""
    source = read_all(east.bootstrap, topic)
    target = {(r.partition, r.value): r.offset for r in read_all(west.bootstrap, f"east.{topic}")}
    out = []
    for offsets in committed:
        row = {}
        for p, u in offsets.items():
            nxt = next(r for r in source if r.partition == p and r.offset >= u)  # the traffic went on
            row[p] = target[(p, nxt.value)]
        out.append(row)
    return out


def _flow(east: KafkaCluster, west: KafkaCluster, topic: str, **settings: object) -> Any:
    # MM2's defaults for every interval: only the live sync can be this quick
    return mirror_config({"east": east.bootstrap, "west": west.bootstrap}, {"east->west": {
        "topics": topic, "groups": "live-.*", "sync.group.offsets.enabled": True, **settings}})


def _waiting(predicate: Callable[[], bool], what: str, unit: float = 0.0) -> float:
    """Wait for ``predicate``: BOUND_S, or ten times ``unit`` (how long this machine took for a
    step the test measured, e.g. the mirror's start) when that is longer, LIVE_CAP_S at most."""
    return wait_until(predicate, min(LIVE_CAP_S, max(BOUND_S, 10 * unit)), 0.005, what)


@pytest.mark.parametrize("mode", ["auto", "poll"])
def test_a_new_group_is_synced_commit_by_commit_exactly_and_quickly(
    east: KafkaCluster, west: KafkaCluster, mode: str
) -> None:
    topic = create_topic(east.bootstrap, unique("live"), partitions=PARTITIONS)
    group = unique("live-g")  # created after the flow started: listed again only after 600 s
    committed: list[dict[int, int]] = []
    seen: list[dict[int, int]] = []
    took: list[float] = []
    config = _flow(east, west, topic, **{"mm2py.sync.group.offsets.live.mode": mode})
    traffic = TransactionalTraffic(east.bootstrap, topic)
    with traffic.running(), BackgroundWorker(config) as bg:
        started = wait_until(lambda: sum(end_offsets(west.bootstrap, f"east.{topic}").values()) > 0, 60, 0.2,
                             "the mirror running")
        for _ in range(5):
            ends = end_offsets(east.bootstrap, topic)
            if committed:  # the traffic has moved every partition since the last commit
                wait_until(lambda: all(end_offsets(east.bootstrap, topic)[p] > committed[-1][p]
                                       for p in range(PARTITIONS)), max(10, 10 * started), 0.02, "traffic")
                ends = end_offsets(east.bootstrap, topic)
            before = _target_group(west, group)
            at = _commit(east, group, topic, ends)
            # every partition moved (the traffic moved each since the last commit): the sync
            # commits a partition as soon as the mirror has passed it, so one may land first
            _waiting(lambda before=before: len(got := _target_group(west, group)) == PARTITIONS  # type: ignore[misc]
                     and all(got[p] != before.get(p) for p in got), f"commit {len(committed)} on the target",
                     started)
            took.append(time.monotonic() - at)
            committed.append(ends)
            seen.append(_target_group(west, group))
        status = bg.worker.flows["east->west"].status()["checkpoints"]
        # the traffic, then the mirror, past the last commit before both topics are read
        wait_until(lambda: all(end_offsets(east.bootstrap, topic)[p] > committed[-1][p] + 20
                               for p in range(PARTITIONS)), 30, 0.05, "traffic past the last commit")
        traffic.stop()
        wait_until(lambda: len(read_all(west.bootstrap, f"east.{topic}"))
                   == len(read_all(east.bootstrap, topic)), 60, 0.5, "everything mirrored")
    assert seen == _exact(east, west, topic, committed)  # each one exact, none behind
    assert status["live"]["mode"] == ("consumer-offsets" if mode == "auto" else "poll"), status
    assert status["group_syncs"] >= 5 and status["groups"] >= 1, status
    checkpoints = [Checkpoint.from_record(r.key, r.value)
                   for r in read_all(west.bootstrap, "east.checkpoints.internal")]
    mine = {(cp.topic_partition.partition, cp.upstream_offset): cp.downstream_offset
            for cp in checkpoints if cp.group == group}
    for offsets, exact in zip(committed, seen, strict=True):  # MM2's format, in MM2's topic
        assert {p: mine[(p, u)] for p, u in offsets.items()} == exact
    print(f"live sync ({mode}): commit to target group {', '.join(f'{t * 1000:.0f}' for t in took)} ms")


def test_groups_active_or_ahead_on_the_target_are_left_alone(east: KafkaCluster, west: KafkaCluster) -> None:
    topic = create_topic(east.bootstrap, unique("live-act"), partitions=PARTITIONS)
    target_topic = f"east.{topic}"
    create_topic(west.bootstrap, target_topic, partitions=PARTITIONS)
    active, ahead = unique("live-active"), unique("live-ahead")
    far = {TopicPartition(target_topic, p): GroupOffset(10_000_000, "mine") for p in range(PARTITIONS)}
    ClusterAdmin("west", west.bootstrap).alter_group_offsets(ahead, far)
    joined = Consumer({"bootstrap.servers": west.bootstrap, "group.id": active, "enable.auto.commit": False})
    joined.subscribe([target_topic])
    member: Consumer | None = joined
    try:
        wait_until(lambda: (joined.poll(0.1), joined.assignment())[1] != [], 30, 0.05, "an active member")
        with TransactionalTraffic(east.bootstrap, topic).running(), \
                BackgroundWorker(_flow(east, west, topic)) as bg:
            wait_until(lambda: sum(end_offsets(west.bootstrap, target_topic).values()) > 0, 60, 0.2,
                       "the mirror running")
            cps = bg.worker.flows["east->west"].checkpoints
            assert cps is not None
            ends = end_offsets(east.bootstrap, topic)
            for group in (active, ahead):
                _commit(east, group, topic, ends)
            # both commits were taken up: checkpointed (MM2 checkpoints groups active on the target)
            _waiting(lambda: all(cp.upstream_offset == ends[tp.partition]
                                 for g in (active, ahead) for tp, cp in cps.latest.get(g).items())
                     and all(len(cps.latest.get(g)) == PARTITIONS for g in (active, ahead)), "checkpoints")
            # then a sync round leaves the active group alone (it follows the checkpoints: on a
            # loaded machine, after the wait above)
            _waiting(lambda: cps.metrics.skipped_active_groups >= 1, "the active group skipped")
            assert _target_group(west, active) == {}  # a group with members: never written to
            assert _target_group(west, ahead) == {p: 10_000_000 for p in range(PARTITIONS)}  # never back
            # once its member has left, the group's next commit is synced live
            joined.close()
            member = None
            wait_until(lambda: all(end_offsets(east.bootstrap, topic)[p] > ends[p]
                                   for p in range(PARTITIONS)), 10, 0.02, "traffic")
            _commit(east, active, topic, end_offsets(east.bootstrap, topic))
            _waiting(lambda: len(_target_group(west, active)) == PARTITIONS, "the group synced once idle")
            assert _target_group(west, ahead) == {p: 10_000_000 for p in range(PARTITIONS)}
    finally:
        if member is not None:
            member.close()


def test_the_feed_decodes_what_the_broker_writes(east: KafkaCluster) -> None:
    """Every record of the cluster's __consumer_offsets reads without error (the tests' groups, joined
    and not, transactional commits included), and a commit shows up with its offset and metadata."""
    from mm2py.stores.commit_feed import ConsumerOffsetsFeed

    topic = create_topic(east.bootstrap, unique("feed"), partitions=1)
    feed = ConsumerOffsetsFeed({"bootstrap.servers": east.bootstrap}, name=unique("feed"))
    try:
        feed.start(30)
        group = unique("feed-g")
        c = Consumer({"bootstrap.servers": east.bootstrap, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[CKTopicPartition(topic, 0, 7, "meta-7")], asynchronous=False)
        c.close()
        found: list[OffsetCommit] = []

        def seen() -> bool:
            for _p, _o, key, value in feed.poll(0.2):
                record = decode_record(key, value)
                if isinstance(record, OffsetCommit) and record.group == group:
                    found.append(record)
            return bool(found)
        _waiting(seen, "the commit in __consumer_offsets")
        assert found[0].partition == TopicPartition(topic, 0)
        value = found[0].value
        # librdkafka commits its metadata as a C string, NUL included; OffsetFetch reads it without
        assert value is not None and (value.offset, value.metadata) == (7, "meta-7\x00")
        assert ClusterAdmin("east", east.bootstrap).group_offsets([group])[group] == {
            TopicPartition(topic, 0): GroupOffset(7, as_fetched(value.metadata))}
    finally:
        feed.close()
    whole = read_all(east.bootstrap, CONSUMER_OFFSETS_TOPIC)
    assert whole
    for r in whole:
        decode_record(r.key, r.value)  # raises on anything it cannot read
