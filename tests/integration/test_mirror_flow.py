"""The identity mirror engine against real brokers: content, raw bytes, refresh, active-active."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest

from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.compression import CodecCounters
from mm2py.protocol.mm2_records import Heartbeat
from mm2py.protocol.types import TopicPartition
from tests.support.brokers import (
    CODECS,
    BackgroundWorker,
    Rec,
    by_partition,
    create_topic,
    end_offsets,
    mirror_config,
    produce_records,
    raw_batches,
    read_all,
    read_syncs,
    topic_names,
    total,
    unique,
    wait_until,
    without_producer_state,
)

pytestmark = pytest.mark.integration


def _clusters(east: KafkaCluster, west: KafkaCluster) -> dict[str, str]:
    return {"east": east.bootstrap, "west": west.bootstrap}


def _mirrored(east: KafkaCluster, west: KafkaCluster, pairs: dict[str, str]) -> bool:
    from confluent_kafka import KafkaException

    try:
        for src, dst in pairs.items():
            if dst not in topic_names(west.bootstrap):
                return False
            if end_offsets(east.bootstrap, src) != end_offsets(west.bootstrap, dst):
                return False
    except KafkaException:  # a target topic just created may have no leader yet
        return False
    return True


def test_three_topics_all_codecs_mirror_identically_asraw_batches(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    prefix = unique("bulk")
    topics = [create_topic(east.bootstrap, f"{prefix}-{i}", partitions=4) for i in range(3)]
    per_codec = 14_000
    for _i, topic in enumerate(topics):
        for c, codec in enumerate(CODECS):
            recs = [
                Rec(r.key, r.value, r.headers, r.timestamp, (n + c) % 4)
                for n, r in enumerate(_records(per_codec, tag=f"{topic}-{codec}"))
            ]
            produce_records(east.bootstrap, topic, recs, compression=codec, linger_ms=200)
    total = sum(sum(end_offsets(east.bootstrap, t).values()) for t in topics)
    assert total >= 200_000

    before = CodecCounters.snapshot()
    config = mirror_config(
        # no merging of small batches (tests/integration/test_coalesce_mirror.py has it): a loaded
        # machine slows the producer above and leaves small batches that would be merged, so this
        # test's claim, every batch passed through as it came, holds for any batch size
        _clusters(east, west), {"east->west": {"topics": f"{prefix}-.*", "tasks.max": 2,
                                               "mm2py.coalesce.enabled": False}}
    )
    pairs = {t: f"east.{t}" for t in topics}
    with BackgroundWorker(config) as bg:
        wait_until(lambda: _mirrored(east, west, pairs), 180, 1, "all topics mirrored")
        status = bg.worker.flows["east->west"].status()
    assert CodecCounters.snapshot() == before, "the steady path decompressed or recompressed"
    assert all(t["state"] in ("RUNNING", "STOPPED") for t in status["tasks"])

    for src, dst in pairs.items():
        sent, got = read_all(east.bootstrap, src), read_all(west.bootstrap, dst)
        assert len(got) == len(sent)
        assert by_partition(got) == by_partition(sent)
        raw_src = raw_batches(east.bootstrap, src, 4)
        raw_dst = raw_batches(west.bootstrap, dst, 4)
        for p in range(4):
            assert [without_producer_state(b) for b in raw_dst[p]] == [
                without_producer_state(b) for b in raw_src[p]
            ]
            assert {b.codec for b in raw_dst[p]} == {b.codec for b in raw_src[p]}


def _records(n: int, tag: str) -> list[Rec]:
    from tests.support.brokers import make_records

    return make_records(n, tag=tag)


def test_topic_created_while_running_is_mirrored_within_one_refresh_interval(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    prefix = unique("grow")
    first = create_topic(east.bootstrap, f"{prefix}-a", partitions=2)
    produce_records(east.bootstrap, first, _records(3000, "a"))
    interval = 3
    config = mirror_config(
        _clusters(east, west),
        {"east->west": {"topics": f"{prefix}-.*", "refresh.topics.interval.seconds": interval}},
    )
    with BackgroundWorker(config) as bg:
        flow = bg.worker.flows["east->west"]
        wait_until(lambda: _mirrored(east, west, {first: f"east.{first}"}), 60, 0.5, "first topic")
        runners = dict(flow.tasks)
        # watch positions of the running partitions: they must never go back
        seen: list[dict[TopicPartition, int]] = []
        watching = threading.Event()
        watching.set()

        def watch() -> None:
            while watching.is_set():
                seen.append({tp: o for r in runners.values() for tp, o in r.positions().items()})
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        second = create_topic(east.bootstrap, f"{prefix}-b", partitions=3)
        created = time.monotonic()
        produce_records(east.bootstrap, second, _records(2000, "b"))
        produce_records(east.bootstrap, first, _records(1000, "a2"))
        wait_until(
            lambda: _mirrored(east, west, {second: f"east.{second}", first: f"east.{first}"}),
            interval + 30, 0.2, "new topic mirrored",
        )
        elapsed = time.monotonic() - created
        watching.clear()
        watcher.join()
        assert flow.tasks == runners, "tasks were replaced"
    assert elapsed <= interval + 10, f"new topic took {elapsed:.1f}s with a {interval}s refresh"
    for tp in [TopicPartition(first, p) for p in range(2)]:
        history = [s[tp] for s in seen if tp in s]
        assert history and all(a <= b for a, b in itertools.pairwise(history)), tp
    # nothing of the first topic was copied twice
    assert sum(end_offsets(west.bootstrap, f"east.{first}").values()) == 4000
    assert len(read_all(west.bootstrap, f"east.{second}")) == 2000


def test_active_active_flows_never_mirror_back(east: KafkaCluster, west: KafkaCluster) -> None:
    prefix = unique("aa")
    on_east = create_topic(east.bootstrap, f"{prefix}-e")
    on_west = create_topic(west.bootstrap, f"{prefix}-w")
    produce_records(east.bootstrap, on_east, _records(500, "e"))
    produce_records(west.bootstrap, on_west, _records(500, "w"))
    pattern = f".*{prefix}-.*"
    config = mirror_config(
        _clusters(east, west),
        {
            "east->west": {"topics": pattern, "refresh.topics.interval.seconds": 1},
            "west->east": {"topics": pattern, "refresh.topics.interval.seconds": 1},
        },
        **{"emit.heartbeats.enabled": True, "heartbeats.replication.enabled": True},
    )
    with BackgroundWorker(config) as bg:
        wait_until(
            lambda: _mirrored(east, west, {on_east: f"east.{on_east}"})
            and _mirrored(west, east, {on_west: f"west.{on_west}"}),
            60, 0.5, "both directions mirrored",
        )
        # heartbeats: each side writes its own and mirrors the other's
        wait_until(lambda: "east.heartbeats" in topic_names(west.bootstrap)
                   and "west.heartbeats" in topic_names(east.bootstrap), 30, 0.5, "heartbeats mirrored")
        # several refresh rounds of each flow see the remote topics on both sides
        controllers = [bg.worker.flows[name].controller for name in ("east->west", "west->east")]
        seen = [c.refreshes for c in controllers]
        wait_until(lambda: all(c.refreshes >= n + 2 for c, n in zip(controllers, seen, strict=True)),
                   30, 0.1, "two more refreshes of each flow")
        east_topics, west_topics = topic_names(east.bootstrap), topic_names(west.bootstrap)
    assert f"west.{on_west}" in east_topics and f"east.{on_east}" in west_topics
    assert not [t for t in east_topics | west_topics if t.startswith(("east.west.", "west.east."))]
    beats = read_all(west.bootstrap, "heartbeats")
    decoded = [Heartbeat.from_record(r.key, r.value) for r in beats]
    # (other modules on these clusters write heartbeats of their own aliases to the same topic)
    assert {(h.source_alias, h.target_alias) for h in decoded
            if {h.source_alias, h.target_alias} <= {"east", "west"}} == {("east", "west")}
    assert len([h for h in decoded if h.source_alias == "east"]) >= 2
    assert read_all(west.bootstrap, "east.heartbeats"), "east's heartbeats were not mirrored"
    assert {Heartbeat.from_record(r.key, r.value).target_alias
            for r in read_all(west.bootstrap, "east.heartbeats")} == {"east"}


def test_source_partitions_added_and_topic_configs_synced(east: KafkaCluster, west: KafkaCluster) -> None:
    from confluent_kafka.admin import ConfigResource

    from mm2py.rdkafka.admin import ClusterAdmin

    topic = create_topic(east.bootstrap, unique("cfg"), partitions=2,
                         config={"retention.ms": "123456789", "max.message.bytes": "2000000"})
    produce_records(east.bootstrap, topic, _records(200, "c"))
    config = mirror_config(
        _clusters(east, west),
        {"east->west": {"topics": topic, "refresh.topics.interval.seconds": 1}},
    )
    with BackgroundWorker(config):
        wait_until(lambda: _mirrored(east, west, {topic: f"east.{topic}"}), 60, 0.5, "mirrored")
        source_admin = ClusterAdmin("east", east.bootstrap)
        source_admin.add_partitions({topic: 4})
        # the broker's metadata has the new partitions a moment after the controller took them
        wait_until(lambda: len(end_offsets(east.bootstrap, topic)) == 4, 30, 0.1, "partitions on east")
        produce_records(east.bootstrap, topic, [
            Rec(r.key, r.value, r.headers, r.timestamp, 3) for r in _records(50, "p3")
        ])
        wait_until(lambda: _mirrored(east, west, {topic: f"east.{topic}"}), 60, 0.5, "new partition")
    target = f"east.{topic}"
    assert len(end_offsets(west.bootstrap, target)) == 4
    assert [r.content() for r in read_all(west.bootstrap, target) if r.partition == 3] == [
        r.content() for r in read_all(east.bootstrap, topic) if r.partition == 3
    ]
    res = ConfigResource(ConfigResource.Type.TOPIC, target)
    target_admin = ClusterAdmin("west", west.bootstrap)
    entries = target_admin._client.describe_configs([res])[res].result(30)
    assert entries["retention.ms"].value == "123456789"
    assert entries["max.message.bytes"].value == "2000000"
    assert entries["compression.type"].value == "producer"  # batches are kept as they come


def test_a_task_runs_a_bounded_round_from_its_spec(east: KafkaCluster, west: KafkaCluster) -> None:
    """What the Spark runtime does on an executor: build a task from plain data, mirror a range."""
    import pickle

    from mm2py.connectors.mirror_task import build_task
    from mm2py.engine.task_contract import TaskSpec
    from mm2py.runtime.flows import controller_for, ensure_internal_topics

    topic = create_topic(east.bootstrap, unique("round"), partitions=2)
    produce_records(east.bootstrap, topic, _records(1000, "r"))
    config = mirror_config(_clusters(east, west), {"east->west": {"topics": topic}})
    flow = config.enabled_flows()[0]  # type: ignore[attr-defined]
    controller = controller_for(flow)
    ensure_internal_topics(flow, controller)
    plan = controller.refresh()
    until = {TopicPartition(topic, p): o for p, o in end_offsets(east.bootstrap, topic).items()}
    spec = pickle.loads(pickle.dumps(TaskSpec(flow, 0, tuple(plan.assignment[0]))))
    produce_records(east.bootstrap, topic, _records(300, "late"))  # beyond the round's bound

    async def round_() -> dict[TopicPartition, int]:
        runner = await build_task(spec)
        try:
            return await runner.run_until(until, timeout=60)
        finally:
            await runner.close()

    positions = asyncio.run(round_())
    assert all(positions[tp] >= o for tp, o in until.items())
    got = read_all(west.bootstrap, f"east.{topic}")
    assert len(got) >= 1000
    src = read_all(east.bootstrap, topic)
    for p in (0, 1):
        want = [r.content() for r in src if r.partition == p]
        have = [r.content() for r in got if r.partition == p]
        assert have == want[: len(have)] and len(have) >= until[TopicPartition(topic, p)]


def test_compacted_source_with_offset_gaps_mirrors_exactly(east: KafkaCluster, west: KafkaCluster) -> None:
    """A really compacted source: batches with gaps are rebuilt, content and syncs stay exact."""
    from confluent_kafka import Producer

    topic = create_topic(east.bootstrap, unique("compact"), partitions=1, config={
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100", "min.compaction.lag.ms": "0",
    })
    p = Producer({"bootstrap.servers": east.bootstrap, "linger.ms": 50, "compression.type": "zstd"})
    for i in range(3000):
        p.produce(topic, f"v{i}".encode(), f"k{i % 40 if i % 3 else i}".encode())
    p.flush(30)
    time.sleep(0.3)
    p.produce(topic, b"roll", b"roll")  # a new segment, so the old one can be cleaned
    p.flush(30)

    def compacted() -> bool:
        return len(read_all(east.bootstrap, topic, timeout=10)) < 3001

    wait_until(compacted, 60, 1, "the log cleaner to compact the source")
    source = read_all(east.bootstrap, topic)
    config = mirror_config(_clusters(east, west), {"east->west": {"topics": topic, "offset.lag.max": 10}})
    with BackgroundWorker(config) as bg:
        # the rebuilt target batches have no offset gaps: the target's end is the record count
        wait_until(lambda: total(west.bootstrap, f"east.{topic}") >= len(source), 60, 0.2, "mirrored")
        rebuilt = bg.worker.flows["east->west"].tasks[0].metrics.rebuilt_batches
    target = read_all(west.bootstrap, f"east.{topic}")
    assert [r.content() for r in target] == [r.content() for r in source[: len(target)]]
    assert rebuilt > 0, "no batch with offset gaps was seen: the source was not compacted as expected"
    assert [r.offset for r in target] == list(range(len(target)))  # contiguous on the target

    from mm2py.engine.offset_syncs import OffsetSyncStore

    store = OffsetSyncStore()
    for sync in read_syncs(east.bootstrap, "mm2-offset-syncs.west.internal"):
        if sync.topic_partition.topic == topic:
            store.add(sync)
    tp = TopicPartition(topic, 0)
    target_end = len(target)
    for u in range(source[0].offset, source[-1].offset + 2):
        nxt = next((i for i, r in enumerate(source) if r.offset >= u), None)
        want = nxt if nxt is not None else target_end
        assert store.translate(tp, u, downstream_end=target_end) == want, f"upstream {u}"


def test_a_partition_moving_between_tasks_is_handed_over_without_duplicates(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    """Deleting a topic shrinks the flow to one task: the other topic's partition moves from
    task 1 to task 0. Task 1 lets go and commits first, so nothing is copied twice."""
    prefix = unique("move")
    first = create_topic(east.bootstrap, f"{prefix}-a")
    second = create_topic(east.bootstrap, f"{prefix}-b")
    produce_records(east.bootstrap, first, _records(500, "a"))
    produce_records(east.bootstrap, second, _records(2000, "b1"))
    config = mirror_config(
        _clusters(east, west),
        {"east->west": {"topics": f"{prefix}-.*", "tasks.max": 2, "refresh.topics.interval.seconds": 1}},
    )
    with BackgroundWorker(config) as bg:
        flow = bg.worker.flows["east->west"]
        wait_until(lambda: _mirrored(east, west, {first: f"east.{first}", second: f"east.{second}"}),
                   60, 0.5, "both topics")
        owner = {tp.topic: tid for tid, r in flow.tasks.items() for tp in r.partitions}
        assert owner == {first: 0, second: 1}
        from mm2py.rdkafka.admin import ClusterAdmin

        admin = ClusterAdmin("east", east.bootstrap)
        admin._client.delete_topics([first])[first].result(30)
        produce_records(east.bootstrap, second, _records(2000, "b2"))
        wait_until(lambda: TopicPartition(second, 0) in flow.tasks[0].partitions, 30, 0.2, "the move")
        produce_records(east.bootstrap, second, _records(2000, "b3"))
        wait_until(lambda: _mirrored(east, west, {second: f"east.{second}"}), 60, 0.5, "after the move")
        assert flow.tasks[1].partitions == ()
    got = read_all(west.bootstrap, f"east.{second}")
    assert [r.content() for r in got] == [r.content() for r in read_all(east.bootstrap, second)]
    assert len(got) == 6000


def test_remote_topics_are_created_with_the_sources_configs_when_config_sync_is_off(
    east: KafkaCluster, west: KafkaCluster
) -> None:
    """Issue 46: with ``sync.topic.configs.enabled = false`` remote topics were created with the
    target's defaults (retention.ms 7 days for a source kept forever; delete for a compacted one).
    On real brokers: the first refresh creates them with the source's filtered configs; a remote
    topic that already exists keeps its own."""
    import uuid

    from mm2py.config.filters import ConfigPropertyFilter, TopicFilter
    from mm2py.config.policy import DefaultReplicationPolicy
    from mm2py.engine.controller import Controller
    from mm2py.rdkafka.admin import ClusterAdmin, TopicSpec

    tag = uuid.uuid4().hex[:8]
    kept, table, theirs = f"kept-{tag}", f"table-{tag}", f"theirs-{tag}"
    source, target = ClusterAdmin("east", east.bootstrap), ClusterAdmin("west", west.bootstrap)
    source.create_topics([TopicSpec(kept, 2, 1, {"retention.ms": "-1"}),
                          TopicSpec(table, 1, 1, {"cleanup.policy": "compact"}),
                          TopicSpec(theirs, 1, 1, {"retention.ms": "-1"})])
    target.create_topics([TopicSpec(f"east.{theirs}", 1, 1, {"retention.ms": "3600000"})])
    controller = Controller("east", "west", source, target, topic_filter=TopicFilter.from_config(f".*-{tag}"),
                            policy=DefaultReplicationPolicy(), sync_topic_configs=False,
                            config_filter=ConfigPropertyFilter.from_config())
    plan = controller.refresh()
    assert sorted(plan.created) == sorted([f"east.{kept}", f"east.{table}"])
    # a topic just created can be unknown for a moment to the broker asked for its configs
    made: dict[str, dict[str, str]] = {}
    wait_until(lambda: len(made | (made.update(target.topic_configs([f"east.{kept}", f"east.{table}",
                                                                      f"east.{theirs}"])) or {})) == 3,
               30, 0.1, "the remote topics' configs")
    assert made[f"east.{kept}"]["retention.ms"] == "-1"
    assert made[f"east.{table}"]["cleanup.policy"] == "compact"
    assert made[f"east.{theirs}"]["retention.ms"] == "3600000"  # created beforehand: left as it is
    assert target.list_topics()[f"east.{kept}"].partitions == 2
