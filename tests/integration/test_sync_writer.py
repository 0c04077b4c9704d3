"""mm2py.stores.sync_writer on a real broker: offset syncs go to partition 0 of the offset-syncs topic
in the order sent, the run syncs among them to the history topic too (one key each), and ``flush``
waits for both; a sync that cannot be written makes ``flush`` fail naming the topic."""

from __future__ import annotations

import pytest

from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.mm2_records import HistorySync, OffsetSync
from mm2py.protocol.types import TopicPartition
from mm2py.stores.sync_writer import OffsetSyncWriter, offset_syncs_topic
from tests.support.brokers import create_topic, read_all, read_syncs, unique

pytestmark = pytest.mark.integration


def test_syncs_in_order_on_partition_zero_and_run_syncs_in_the_history(east: KafkaCluster) -> None:
    alias = unique("sw")
    topic = create_topic(east.bootstrap, offset_syncs_topic(alias), 2)  # MM2's readers fold partition 0
    assert topic == f"mm2-offset-syncs.{alias}.internal"
    history = create_topic(east.bootstrap, unique("sync-history"), 1, {"cleanup.policy": "compact"})
    writer = OffsetSyncWriter(east.bootstrap, topic, history_topic=history)
    tp = TopicPartition("orders", 3)
    first = [OffsetSync(tp, 0, 0), OffsetSync(tp, 10, 7), OffsetSync(TopicPartition("pay", 0), 5, 5)]
    writer.send(first, runs=[first[1]])
    second = [OffsetSync(tp, 20, 15)]
    writer.send(second, runs=second)
    writer.flush(timeout=30)
    assert writer.sent == 4
    # flushed: everything is there to read at once, in the order sent
    assert read_syncs(east.bootstrap, topic) == first + second
    records = read_all(east.bootstrap, topic)
    assert {r.partition for r in records} == {0}
    kept = [HistorySync.from_record(r.key, r.value) for r in read_all(east.bootstrap, history)]
    assert [h.sync for h in kept] == [first[1], second[0]]


def test_flush_fails_naming_the_topic_when_a_sync_cannot_be_written(east: KafkaCluster) -> None:
    missing = unique("no-such-topic")  # the test brokers create no topic on a write
    writer = OffsetSyncWriter(east.bootstrap, missing, {"message.timeout.ms": 3000})
    writer.send([OffsetSync(TopicPartition("orders", 0), 1, 1)])
    with pytest.raises(RuntimeError, match=f"writing offset syncs to {missing} failed"):
        writer.flush(timeout=30)
