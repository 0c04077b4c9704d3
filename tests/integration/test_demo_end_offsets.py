"""mm2py.cli.demo's table of end offsets read from a real cluster: the records of every partition
of a topic summed, and 0 for a topic the cluster does not have (yet)."""

from __future__ import annotations

import pytest

from mm2py.cli.demo import _end_offsets
from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import Rec, create_topic, make_records, produce_records, unique

pytestmark = pytest.mark.integration


def test_end_offsets_sum_the_partitions_and_a_missing_topic_has_none(east: KafkaCluster) -> None:
    topic = create_topic(east.bootstrap, unique("demo"), 3)
    records = [Rec(r.key, r.value, r.headers, r.timestamp, i % 3) for i, r in enumerate(make_records(47))]
    produce_records(east.bootstrap, topic, records)  # 16, 16, 15 records
    missing = unique("not-created")
    assert _end_offsets(east.bootstrap, [topic, missing]) == {topic: 47, missing: 0}
