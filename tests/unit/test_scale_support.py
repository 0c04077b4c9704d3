"""The pure helpers of benchmarks/scale_support.py: topic layout, sampling, JmxTool's output, rates."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from scale_support import Row, layout, parse_jmx, partitions_of, rates, sample


def test_layout_spreads_partitions_over_topics() -> None:
    topics = layout("t-", 3, 10)
    assert topics == {"t-0": 4, "t-1": 3, "t-2": 3}
    assert len(partitions_of(topics)) == 10


def test_sample_takes_the_lowest_partitions_of_every_topic() -> None:
    topics = layout("t-", 4, 40)
    assert sample(topics, 8) == [(t, p) for t in topics for p in (0, 1)]
    assert len(sample(topics, 1000)) == 40  # never more than there are


def test_parse_jmx_sums_the_versions_of_each_request() -> None:
    text = (
        'time,"1795635446102"\n'
        'kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Fetch,version=12:Count,"7"\n'
        'kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Fetch,version=17:Count,"5"\n'
        'kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce,version=10:Count,"11"\n'
    )
    assert parse_jmx(text) == (1795635446.102, {"Fetch": 12, "Produce": 11})
    assert parse_jmx("Trying to connect to JMX url: ...\n") is None


def test_rates_divide_by_the_brokers_clock() -> None:
    before = (100.0, {"Fetch": 10, "Produce": 0})
    after = (110.0, {"Fetch": 60, "Produce": 20})
    assert rates(before, after) == {"Fetch": 5.0, "Produce": 2.0}
    assert rates(None, after) == {}
    # every request type the meters count, one first seen in the later reading from 0
    later = (110.0, {"Fetch": 60, "Produce": 20, "ListOffsets": 30})
    assert rates(before, later) == {"Fetch": 5.0, "ListOffsets": 3.0, "Produce": 2.0}


def test_percentiles_rank_records_never_seen_last() -> None:
    row = Row("p", latencies_ms=[1.0, 2.0, 3.0], not_arrived=1)
    assert row.percentile(0.5) == 2.0
    assert row.percentile(1.0) == math.inf
