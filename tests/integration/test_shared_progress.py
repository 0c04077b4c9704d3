"""One progress producer for the tasks of a flow in one process (``ProgressProducer(shared=True)``):
each store's commit returns once its own records are acknowledged, whichever thread served their
delivery reports, and loads back as if each had written alone."""

from __future__ import annotations

import threading

import pytest

from mm2py.kafka_local import KafkaCluster
from mm2py.kafka_local.cluster import free_port
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.stores.positions import PositionStore, ProgressProducer
from tests.support.brokers import unique

pytestmark = pytest.mark.timeout(300)


def test_stores_sharing_a_producer_commit_at_once_and_each_reads_back_its_own(west: KafkaCluster) -> None:
    alias = unique("src")
    admin = ClusterAdmin("west", west.bootstrap)
    shared = ProgressProducer.for_admin(admin, shared=True)
    stores = [PositionStore(admin, alias, replication_factor=1, partitions=25, producer=shared)
              for _ in range(4)]
    stores[0].ensure_topic()
    # each task its own partitions (tasks are disjoint), several commits each, all at once
    mine = [{TopicPartition(f"t{task}-{t}", p): Position(0, 0) for t in range(5) for p in range(20)}
            for task in range(4)]
    failures: list[BaseException] = []
    start = threading.Barrier(4)

    def commit_often(store: PositionStore, positions: dict[TopicPartition, Position]) -> None:
        try:
            start.wait(30)
            for round_ in range(1, 6):
                store.commit({tp: Position(round_ * 10 + tp.partition, round_) for tp in positions})
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    threads = [threading.Thread(target=commit_often, args=(s, m)) for s, m in zip(stores, mine, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures
    for store in stores:
        store.close()  # a shared producer is not the store's to close: the next commit still goes
    stores[1].commit({TopicPartition("t1-0", 0): Position(99, 9)})
    shared.close()
    loaded = PositionStore(admin, alias).load()
    expected = {tp: Position(50 + tp.partition, 5) for positions in mine for tp in positions}
    expected[TopicPartition("t1-0", 0)] = Position(99, 9)
    assert loaded == expected


def test_a_shared_producer_that_cannot_reach_its_cluster_fails_the_commit_within_its_timeout() -> None:
    admin = ClusterAdmin("nowhere", f"127.0.0.1:{free_port()}", timeout=2.0)
    store = PositionStore(admin, "src", producer=ProgressProducer.for_admin(admin, shared=True))
    with pytest.raises(RuntimeError, match=r"1 record\(s\) unacknowledged"):
        store.commit({TopicPartition("t", 0): Position(5, 5)}, timeout=1.0)
