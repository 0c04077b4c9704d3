"""Replication latency, record age and lag in time: the histograms, what the TaskRunner observes,
and what /metrics exports."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from mm2py.engine.latency import LATENCY_BUCKETS, Histogram, PartitionTimes, observe_fetch
from mm2py.engine.task import TaskRunner
from mm2py.engine.task_contract import TaskSpec
from mm2py.protocol.record_codec import Record, build_batch
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from tests.support.memory_task import TP, Log, MemoryProgress, MemorySink, MemorySource, values

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path


def test_a_histogram_counts_each_value_in_its_bucket() -> None:
    h = Histogram()
    for v in (0.0005, 0.003, 0.003, 0.2, 1000.0, -5.0):  # -5: a clock ahead of ours counts as 0
        h.observe(v)
    cumulative = dict(h.cumulative())
    assert cumulative["0.001"] == 2 and cumulative["0.005"] == 4 and cumulative["0.25"] == 5
    assert cumulative["+Inf"] == h.count == 6
    assert h.total == pytest.approx(0.0005 + 0.006 + 0.2 + 1000.0)
    assert h.quantile(0.5) == 0.005 and h.quantile(0.99) == float("inf")
    other = Histogram.of(h.counts, h.total)
    other.add(h)
    assert other.count == 12
    with pytest.raises(ValueError):
        Histogram.of([1, 2], 0.0)


def _stamped(base: int, n: int, timestamp_ms: int) -> RecordBatch:
    return RecordBatch(build_batch([Record(i, 0, b"k", f"v{base + i}".encode()) for i in range(n)],
                                   base_offset=base, base_timestamp=timestamp_ms))


def test_lag_in_time_is_the_age_of_the_newest_record_while_behind_and_zero_when_caught_up() -> None:
    times: dict = {}
    observe_fetch(times, TP, [_stamped(0, 2, 10_000), _stamped(2, 2, 12_000)], behind=True, now=15.0)
    assert times[TP].lag_seconds == pytest.approx(3.0)
    assert times[TP].age.count == 2 and times[TP].age.total == pytest.approx(5.0 + 3.0)
    observe_fetch(times, TP, [_stamped(4, 2, 14_000)], behind=False, now=15.0)
    assert times[TP].lag_seconds == 0.0


def test_the_task_runner_measures_every_delivered_batch_against_the_wall_clock() -> None:
    log = Log([_stamped(0, 3, 1_000), _stamped(3, 3, 1_100), _stamped(6, 3, 1_200)], end=9)
    sink = MemorySink()
    runner = TaskRunner(TaskSpec(None, 0, (TP,)), MemorySource({TP: log}), sink, MemoryProgress(),
                        commit_interval=0, retry_backoff=0, wall_clock=lambda: 1.5)
    asyncio.run(runner.run_until({TP: 9}, timeout=10))
    assert len(values(sink)) == 9
    t = runner.metrics.times[TP]
    assert t.replication.count == 3  # one observation per acknowledged batch
    assert t.replication.total == pytest.approx(0.5 + 0.4 + 0.3)
    assert t.age.count == 3


def test_batches_without_timestamps_are_not_measured() -> None:
    times: dict = {}
    observe_fetch(times, TP, [_stamped(0, 1, -1)], behind=True, now=5.0)
    assert times[TP].age.count == 0


def test_metrics_export_latency_histograms_per_partition_merging_tasks() -> None:
    from mm2py.engine.task_contract import TaskMetrics
    from mm2py.runtime.metrics import WorkerCollector

    def task(*latencies: float) -> SimpleNamespace:
        m = TaskMetrics()
        t = m.times[TP] = PartitionTimes(lag_seconds=2.0)
        for v in latencies:
            t.replication.observe(v)
        return SimpleNamespace(metrics=m, state="RUNNING", partitions=(TP,))

    # the partition moved from task 0 to task 1: one series, both tasks' observations
    flow = SimpleNamespace(tasks={0: task(0.004), 1: task(0.02, 0.03)}, checkpoints=None)
    worker = SimpleNamespace(flows={"east->west": flow}, codec_operations=lambda: (0, 0))
    samples = [s for m in WorkerCollector(worker).collect() for s in m.samples]  # type: ignore[arg-type]
    buckets = {s.labels["le"]: s.value for s in samples
               if s.name == "mm2py_replication_latency_seconds_bucket"}
    assert buckets["0.005"] == 1 and buckets["0.025"] == 2 and buckets["+Inf"] == 3
    assert len(buckets) == len(LATENCY_BUCKETS) + 1
    lag = [s for s in samples if s.name == "mm2py_partition_lag_seconds"]
    assert [(s.labels["topic"], s.value) for s in lag] == [(TP.topic, 2.0)]


def test_the_served_page_writes_the_partition_times_as_the_collector_yields_them() -> None:
    """The page's text for the per-partition time families (written straight from the counts) parses
    to the samples WorkerCollector yields for them: same names, labels and values."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families

    from mm2py.engine.task_contract import TaskMetrics
    from mm2py.runtime.metrics import WorkerCollector
    from mm2py.runtime.metrics_page import PartitionTimesPage, metrics_page

    def task(*tps: TopicPartition) -> SimpleNamespace:
        m = TaskMetrics()
        for i, tp in enumerate(tps):
            t = m.times[tp] = PartitionTimes(lag_seconds=0.25 * i)
            for v in (0.001 * (i + 1), 0.3, 7.5 + i, 1e6):
                t.replication.observe(v)
                t.age.observe(v / 3)
        return SimpleNamespace(metrics=m, state="RUNNING", partitions=tps)

    parts = [TopicPartition(f"orders.{k}", p) for k in range(3) for p in range(4)]
    worker = SimpleNamespace(
        flows={"east->west": SimpleNamespace(tasks={0: task(*parts[:7]), 1: task(*parts[5:])},
                                             checkpoints=None),
               'a"b->c': SimpleNamespace(tasks={0: task(parts[0])}, checkpoints=None)},
        codec_operations=lambda: (0, 0))
    names = ("mm2py_replication_latency_seconds", "mm2py_record_age_seconds", "mm2py_partition_lag_seconds")

    def samples(families: Any) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        return sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                      for f in families if f.name in names for s in f.samples)

    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker, partition_times=False))  # type: ignore[arg-type]
    page = metrics_page(registry, PartitionTimesPage(worker)).decode()
    expected = samples(WorkerCollector(worker).collect())  # type: ignore[arg-type]
    assert len(expected) == 13 * (2 * (len(LATENCY_BUCKETS) + 3) + 1)
    assert samples(text_string_to_metric_families(page)) == expected
    assert not samples(WorkerCollector(worker, partition_times=False).collect())  # type: ignore[arg-type]
