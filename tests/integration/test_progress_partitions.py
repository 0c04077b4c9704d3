"""The progress topic partitioned as Kafka Connect partitions it, and the repair of one that is not.

Kafka Connect (so MirrorMaker 2) writes each source-offset key to the partition Java's producer
picks, murmur2 of the key; mm2py must put each key in the same partition, or a compacted topic holds
two live values for one key and MM2 may read the stale one (issue 31).
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer

from mm2py.kafka_local import KafkaCluster, resolve_jars
from mm2py.kafka_local.class_archive import class_archive_args
from mm2py.kafka_local.jars import QUICK_JVM, java_executable
from mm2py.protocol.connect_offsets import Position, encode_key, encode_value, progress_topic
from mm2py.protocol.partitioner import partition_for_key
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.stores.positions import PositionStore
from mm2py.stores.progress_repair import repair
from tests.support.brokers import create_topic, placed_records, unique

pytestmark = pytest.mark.timeout(300)

JAVA = Path(__file__).with_name("java") / "PartitionForKey.java"
COUNTS = (1, 5, 25, 50)


def _java_partitions(keys: list[bytes]) -> list[list[int]]:
    """Each key's partition for each of COUNTS, from Kafka's own BuiltInPartitioner."""
    out = subprocess.run(
        [java_executable(), QUICK_JVM, *class_archive_args("java-source", resolve_jars()),
         "-cp", f"{resolve_jars()}/*", str(JAVA), *map(str, COUNTS)],
        input="\n".join(k.hex() for k in keys) + "\n", capture_output=True, text=True, timeout=120,
        check=True,
    ).stdout
    return [[int(x) for x in line.split()] for line in out.splitlines()]


def test_partition_for_key_is_kafkas_own_for_many_keys() -> None:
    rng = random.Random(31)
    keys = [encode_key(alias, TopicPartition(f"topic-{t}", p), connector)
            for alias in ("east", "us-west-2") for t in range(40) for p in range(25)
            for connector in ("MirrorSourceConnector", "mirror-fast")]
    keys += [rng.randbytes(rng.randrange(0, 200)) for _ in range(2000)]
    assert len(keys) > 5000
    java = _java_partitions(keys)
    assert len(java) == len(keys)
    mismatches = [(k, j, [partition_for_key(k, n) for n in COUNTS]) for k, j in zip(keys, java, strict=True)
                  if j != [partition_for_key(k, n) for n in COUNTS]]
    assert not mismatches, mismatches[:3]


def test_positions_land_where_kafka_connect_puts_them(west: KafkaCluster) -> None:
    alias = unique("src")
    admin = ClusterAdmin("west", west.bootstrap)
    store = PositionStore(admin, alias, replication_factor=1, partitions=25)
    store.ensure_topic()
    positions = {TopicPartition(f"t{t}", p): Position(100 + p, 7) for t in range(10) for p in range(8)}
    store.commit(positions)
    store.close()
    records = placed_records(west.bootstrap, progress_topic(alias))
    assert len(records) == len(positions)
    assert len({p for p, _, _ in records}) > 10  # spread over the topic, not all in one partition
    assert [(p, k) for p, k, _ in records if partition_for_key(k, 25) != p] == []
    assert PositionStore(admin, alias).load() == positions


def test_a_key_in_two_partitions_resolves_to_the_newest_and_the_repair_moves_it_home(
        west: KafkaCluster) -> None:
    """Written the old way (librdkafka's default partitioner): keys outside their partition, two of
    them live in two partitions. mm2py reads the newest value whatever the order; after the repair,
    every key is only in its proper partition, so a reader that keeps the last record it reads (as
    Connect's offset store does) gets the newest value in any order, and other keys are untouched."""
    alias = unique("src")
    topic = progress_topic(alias)
    create_topic(west.bootstrap, topic, 25, {"cleanup.policy": "compact", "retention.ms": "3600000"})
    tps = [TopicPartition("orders", p) for p in range(6)]
    key = {tp: encode_key(alias, tp) for tp in tps}
    home = {tp: partition_for_key(key[tp], 25) for tp in tps}
    stray = {tp: (home[tp] + 3) % 25 for tp in tps}
    producer = Producer({"bootstrap.servers": west.bootstrap, "acks": "all"})
    t0 = 1_700_000_000_000
    # tps 0, 1: MM2's older value at home, a newer mm2py value astray
    # tp 2: an mm2py value astray, then MM2's newer one at home
    # tp 3: astray only; tps 4, 5: at home only (must come out as they were)
    plan = [
        (tps[0], home, 10, 1), (tps[0], stray, 50, 2),
        (tps[1], home, 20, 1), (tps[1], stray, 60, 2),
        (tps[2], stray, 30, 1), (tps[2], home, 70, 2),
        (tps[3], stray, 40, 1),
        (tps[4], home, 44, 1), (tps[5], home, 55, 1),
    ]
    for tp, where, last, ts in plan:
        producer.produce(topic, encode_value(last, last * 10), key[tp], partition=where[tp],
                         timestamp=t0 + ts)
    assert producer.flush(30) == 0
    expected = {tps[0]: Position(51, 500), tps[1]: Position(61, 600), tps[2]: Position(71, 700),
                tps[3]: Position(41, 400), tps[4]: Position(45, 440), tps[5]: Position(56, 550)}

    admin = ClusterAdmin("west", west.bootstrap)
    assert PositionStore(admin, alias).load() == expected

    dry = repair(admin, topic, dry_run=True)
    assert (dry.strays, dry.keys) == (4, 6)
    report = repair(admin, topic)
    assert report.strays == 4
    assert report.emptied == sorted({stray[tp] for tp in tps[:4]})

    records = placed_records(west.bootstrap, topic)
    assert [(p, k) for p, k, _ in records if partition_for_key(k, 25) != p] == []
    for way in (1, -1):  # partitions read in two orders, each partition's records in its own
        last: dict[bytes, bytes | None] = {}
        for _, k, v in sorted(records, key=lambda r: way * r[0]):
            last[k] = v
        assert {tp: last.get(key[tp]) for tp in tps} == {
            tp: encode_value(pos.source - 1, pos.target) for tp, pos in expected.items()}
    assert PositionStore(admin, alias).load() == expected
    assert repair(admin, topic, dry_run=True).strays == 0
    # the topic's own settings are back: compacted, its retention as it was
    configs = admin.topic_configs([topic])[topic]
    assert configs.get("cleanup.policy") == "compact" and configs.get("retention.ms") == "3600000"
    assert "retention.bytes" not in configs, configs
