"""The operator page's sampler: bounded series, oldest first, rates and interval quantiles."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from mm2py.engine.latency import PartitionTimes
from mm2py.rest_api.ui.sampler import BEYOND, FLOW_SERIES, PARTITION_SERIES, PartitionRings, Ring, Sampler
from tests.support.fake_tasks import TP0, TP1, Clock, Task


@dataclass
class Runner:
    tasks: dict[int, Task]


def nan_or(values: list[float]) -> list[float | None]:
    return [None if math.isnan(v) else v for v in values]


def test_a_ring_keeps_the_last_values_oldest_first_and_its_size_is_fixed() -> None:
    ring = Ring(4)
    assert ring.values() == [] and ring.nbytes == 16
    for v in range(1, 7):
        ring.append(float(v))
    assert ring.values() == [3.0, 4.0, 5.0, 6.0] and ring.nbytes == 16
    late = Ring(4, count=2)  # a series born after two samples: those read as NaN
    late.append(1.0)
    assert nan_or(late.values()) == [None, None, 1.0]
    assert not late.empty() and Ring(3).empty()


def test_partition_rings_keep_each_partitions_window_and_forget_one_gone_for_all_of_it() -> None:
    import numpy as np

    table = PartitionRings(3)
    for v in range(4):  # 0, 1, 2, 3: the window keeps the last three
        table.append([TP0, TP1], np.array([[v, 10 + v]] * len(PARTITION_SERIES), dtype=float))
    assert table.series(TP0)["lag_records"] == [1.0, 2.0, 3.0]  # type: ignore[index]
    assert table.series(TP1)["p99"] == [11.0, 12.0, 13.0]  # type: ignore[index]
    assert table.nbytes == 3 * len(PARTITION_SERIES) * 2 * 4
    table.append([TP0], np.array([[4.0]] * len(PARTITION_SERIES)))
    assert nan_or(table.series(TP1)["lag_records"]) == [12.0, 13.0, None]  # type: ignore[index]
    table.append([TP0], np.array([[5.0]] * len(PARTITION_SERIES)))
    table.append([TP0], np.array([[6.0]] * len(PARTITION_SERIES)))
    assert table.series(TP1) is None and table.frames.shape[2] == 1  # forgotten: memory back
    assert table.series(TP0)["lag_records"] == [4.0, 5.0, 6.0]  # type: ignore[index]


def test_a_sampler_keeps_15_minutes_of_every_series_and_no_more() -> None:
    clock = Clock()
    task = Task((TP0,))
    flows: dict[str, Any] = {"east->west": Runner({0: task})}
    sampler = Sampler(lambda: flows, interval=5, window=900, clock=clock)
    assert sampler.capacity == 180
    for _ in range(500):
        clock.now += 5
        sampler.sample()
    assert len(sampler.times.values()) == 180 and sampler.times.values()[-1] == clock.now
    assert set(sampler.flow_series["east->west"]) == set(FLOW_SERIES)
    assert set(sampler.partition_series["east->west"].series(TP0) or ()) == set(PARTITION_SERIES)
    assert sampler.partition_series["east->west"].nbytes == 720 * len(PARTITION_SERIES)
    assert all(len(r.values()) == 180 and r.nbytes == 720 for r in sampler.flow_series["east->west"].values())
    # a removed flow runs on as NaN, then is forgotten once its window holds no value of it
    del flows["east->west"]
    for _ in range(179):
        clock.now += 5
        sampler.sample()
    assert "east->west" in sampler.flow_series and "east->west" not in sampler.now
    clock.now += 5
    sampler.sample()
    assert sampler.flow_series == {} and sampler.partition_series == {}


def test_rates_lags_and_latency_quantiles_between_two_samples() -> None:
    clock = Clock()
    task = Task((TP0, TP1), acked={TP0: 100, TP1: 0})
    flows: dict[str, Any] = {"f": Runner({3: task})}
    sampler = Sampler(lambda: flows, interval=1, window=60, clock=clock)
    sampler.sample()
    assert math.isnan(sampler.now["f"]["records_per_s"])  # a rate needs two samples

    clock.now += 2
    m = task.metrics
    m.records, m.bytes = 400, 4000
    m.lag = {TP0: 7, TP1: 5}
    m.times = {TP0: PartitionTimes(lag_seconds=2.5), TP1: PartitionTimes()}
    for _ in range(98):
        m.times[TP0].replication.observe(0.004)  # the 0.005 bucket
    m.times[TP0].replication.observe(0.2)
    m.times[TP0].replication.observe(0.2)  # the 0.25 bucket: the 99th percentile
    task.acked = {TP0: 500, TP1: 0}
    sampler.sample()
    now = sampler.now["f"]
    assert (now["records_per_s"], now["bytes_per_s"]) == (200.0, 2000.0)
    assert (now["lag_records"], now["lag_seconds"]) == (12.0, 2.5)
    assert (now["p50"], now["p99"]) == (0.005, 0.25)
    p = sampler.partitions_now["f"]
    assert p.partitions == [TP0, TP1]
    assert (p.tasks[0], p.lag_records[0], p.lag_seconds[0], p.records_per_s[0]) == (3, 7.0, 2.5, 200.0)
    assert (p.p50[0], p.p99[0]) == (0.005, 0.25)
    assert math.isnan(p.p99[1])  # nothing acknowledged there

    # the next interval: only what was acknowledged since counts; a reset counter counts from zero
    clock.now += 1
    m.times[TP0].replication.observe(40.0)
    m.records, m.bytes = 30, 300  # fresh tasks after a restart
    sampler.sample()
    now = sampler.now["f"]
    assert (now["p50"], now["p99"]) == (60.0, 60.0)
    clock.now += 1
    m.times[TP0].replication.observe(3600.0)  # past the last bucket: "more than 300 s"
    sampler.sample()
    assert sampler.now["f"]["p99"] == BEYOND == 600.0
    assert (now["records_per_s"], now["bytes_per_s"]) == (30.0, 300.0)
    assert nan_or(sampler.flow_series["f"]["records_per_s"].values()) == [None, 200.0, 30.0, 0.0]


def test_a_sample_interval_must_fit_the_window() -> None:
    with pytest.raises(ValueError):
        Sampler(dict, interval=0)
    with pytest.raises(ValueError):
        Sampler(dict, interval=10, window=5)
