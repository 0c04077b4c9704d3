"""The operator page's memory: a few figures of every flow and partition, sampled every few seconds.

A :class:`Sampler` reads what the worker already keeps (each task's counters, its partitions' lag
and latency histograms, the in-process runtime's acknowledged positions) at every sample, on the
event loop, between the tasks' steps: nothing is added to the mirror's data path. Each figure is a
:class:`Ring` of ``window / interval`` samples (15 min at 5 s: 180) of 4-byte floats, NaN where it
had no value (a flow paused, a partition not yet assigned): **720 bytes per series** at the
defaults. A flow has :data:`FLOW_SERIES` (6 series, 4.3 KB), a partition :data:`PARTITION_SERIES`
(4 series, 2.9 KB: 5.8 MB for 2,000 partitions); a series with no value left in its window (a
removed flow, a partition no longer mirrored for 15 min) is dropped, so memory stays bounded by
what ran in the window.

Rates are per second between two samples (a counter that went down — a restarted flow's fresh
tasks — counts from zero). Latency quantiles are those of the batches acknowledged between two
samples (the histograms' difference), as the upper bound of their bucket (``LATENCY_BUCKETS``;
above the last one: :data:`BEYOND`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mm2py.engine.latency import LATENCY_BUCKETS, Histogram
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.flows import FlowRunnerBase

__all__ = ["BEYOND", "FLOW_SERIES", "PARTITION_SERIES", "PartitionNow", "Ring", "Sampler"]

NAN = float("nan")
#: a flow's series: records and bytes per second, lag (sum of records, the largest in seconds),
#: replication latency p50/p99 of the batches acknowledged since the previous sample
FLOW_SERIES = ("records_per_s", "bytes_per_s", "lag_records", "lag_seconds", "p50", "p99")
#: a partition's series (records per second: acknowledged source offsets, where the runtime tells)
PARTITION_SERIES = ("lag_records", "lag_seconds", "records_per_s", "p99")
_BUCKETS = len(LATENCY_BUCKETS) + 1
#: a latency quantile above the last bucket's bound (300 s) reads as twice that bound (the page
#: shows "> 5 min")
BEYOND = 2 * LATENCY_BUCKETS[-1]


class Ring:
    """The last ``capacity`` values of a series, as 4-byte floats (NaN: no value at that sample)."""

    __slots__ = ("_count", "_values")

    def __init__(self, capacity: int, count: int = 0, typecode: str = "f") -> None:
        """``count``: samples taken before this series existed (they read as NaN)."""
        self._values = array(typecode, [NAN]) * capacity
        self._count = count

    @property
    def capacity(self) -> int:
        return len(self._values)

    @property
    def nbytes(self) -> int:
        return self._values.itemsize * len(self._values)

    def append(self, value: float) -> None:
        self._values[self._count % len(self._values)] = value
        self._count += 1

    def values(self) -> list[float]:
        """Oldest first; as many as were sampled, at most ``capacity``."""
        cap, n = len(self._values), self._count
        if n <= cap:
            return self._values[:n].tolist()
        cut = n % cap
        return (self._values[cut:] + self._values[:cut]).tolist()

    def latest(self) -> float:
        return self._values[(self._count - 1) % len(self._values)] if self._count else NAN

    def empty(self) -> bool:
        """No value in the window (every slot NaN)."""
        return all(v != v for v in self._values)


@dataclass
class PartitionNow:
    """A partition's figures at the latest sample."""

    task: int
    lag_records: float
    lag_seconds: float
    records_per_s: float
    p50: float
    p99: float


@dataclass
class _Previous:
    """What the previous sample read, to turn counters into rates and histograms into intervals."""

    records: float = 0.0
    bytes: float = 0.0
    latency: list[int] = field(default_factory=lambda: [0] * _BUCKETS)
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    partition_latency: dict[TopicPartition, list[int]] = field(default_factory=dict)


def _increase(now: float, before: float) -> float:
    """A counter's increase; one that went down was reset (fresh tasks) and counts from zero."""
    return now - before if now >= before else now


def _quantiles(now: list[int], before: list[int] | None) -> tuple[float, float]:
    """p50 and p99 of the observations between two readings of a histogram (NaN: none)."""
    delta = now if before is None else [a - b for a, b in zip(now, before, strict=True)]
    if any(d < 0 for d in delta):
        delta = now  # the histogram was reset (fresh tasks)
    h = Histogram(list(delta))
    if h.count == 0:
        return NAN, NAN
    return min(h.quantile(0.5), BEYOND), min(h.quantile(0.99), BEYOND)


class Sampler:
    """Samples ``flows()`` (name -> runner) every ``interval`` seconds into bounded series."""

    def __init__(self, flows: Callable[[], Mapping[str, FlowRunnerBase[Any]]], interval: float = 5.0,
                 window: float = 900.0, clock: Callable[[], float] = time.time) -> None:
        if interval <= 0 or window < interval:
            raise ValueError(f"a sample interval in (0, window]: {interval} s in {window} s")
        self.flows, self.interval, self.window, self.clock = flows, interval, window, clock
        self.capacity = int(window // interval)
        self.count = 0
        self.times = Ring(self.capacity, typecode="d")  # seconds since the epoch
        self.flow_series: dict[str, dict[str, Ring]] = {}
        self.partition_series: dict[str, dict[TopicPartition, dict[str, Ring]]] = {}
        self.now: dict[str, dict[str, float]] = {}
        self.partitions_now: dict[str, dict[TopicPartition, PartitionNow]] = {}
        self._previous: dict[str, _Previous] = {}
        self._last: float | None = None
        self._task: asyncio.Task[None] | None = None

    # -- running ------------------------------------------------------------------------------
    def start(self) -> None:
        """Sample now and every ``interval`` seconds on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    # -- one sample -----------------------------------------------------------------------------
    def sample(self) -> None:
        """Read every flow once and append a value (or NaN) to every series."""
        now = self.clock()
        elapsed = None if self._last is None else max(now - self._last, 1e-6)
        self._last = now
        seen: set[str] = set()
        for name, runner in list(self.flows().items()):
            seen.add(name)
            self._sample_flow(name, runner, elapsed)
        for name in list(self.flow_series):
            if name not in seen:
                self._absent(name)
        self.times.append(now)
        self.count += 1

    def _series(self, store: dict[Any, dict[str, Ring]], key: Any, names: Iterable[str]) -> dict[str, Ring]:
        rings = store.get(key)
        if rings is None:
            rings = store[key] = {n: Ring(self.capacity, self.count) for n in names}
        return rings

    def _absent(self, name: str) -> None:
        """A flow gone from the worker: its series run on as NaN until the window forgets it."""
        self.now.pop(name, None)
        self.partitions_now.pop(name, None)
        self._previous.pop(name, None)
        for ring in self.flow_series[name].values():
            ring.append(NAN)
        for rings in self.partition_series.get(name, {}).values():
            for ring in rings.values():
                ring.append(NAN)
        if all(r.empty() for r in self.flow_series[name].values()):
            del self.flow_series[name]
            self.partition_series.pop(name, None)

    def _sample_flow(self, name: str, runner: FlowRunnerBase[Any], elapsed: float | None) -> None:
        before = self._previous.get(name)
        current = _Previous()
        parts: dict[TopicPartition, PartitionNow] = {}
        latency = [0] * _BUCKETS
        for task_id, task in list(runner.tasks.items()):
            m = task.metrics
            current.records += m.records
            current.bytes += m.bytes
            positions = getattr(task, "positions", None)  # the in-process TaskRunner's; Spark: none
            if callable(positions):
                current.positions.update(positions())
            for tp in task.partitions:
                parts[tp] = PartitionNow(task_id, float(m.lag.get(tp, 0)), 0.0, NAN, NAN, NAN)
            for tp, times in list(m.times.items()):
                counts = current.partition_latency.get(tp)
                current.partition_latency[tp] = (list(times.replication.counts) if counts is None
                                                 else [a + b for a, b in zip(counts, times.replication.counts,
                                                                             strict=True)])
                if tp in parts:
                    parts[tp].lag_seconds = times.lag_seconds
        for tp, p in parts.items():
            counts = current.partition_latency.get(tp)
            if counts is not None:
                latency = [a + b for a, b in zip(latency, counts, strict=True)]
                if before is not None:
                    p.p50, p.p99 = _quantiles(counts, before.partition_latency.get(tp))
            if before is not None and elapsed is not None and tp in current.positions:
                was = before.positions.get(tp)
                if was is not None:
                    p.records_per_s = max(0, current.positions[tp] - was) / elapsed
        self._previous[name] = current
        self.partitions_now[name] = parts
        figures = self._flow_figures(current, before, elapsed, parts, latency)
        self.now[name] = figures
        for key, ring in self._series(self.flow_series, name, FLOW_SERIES).items():
            ring.append(figures[key])
        self._sample_partitions(name, parts)

    def _flow_figures(self, current: _Previous, before: _Previous | None, elapsed: float | None,
                      parts: Mapping[TopicPartition, PartitionNow], latency: list[int]) -> dict[str, float]:
        rate_records = rate_bytes = NAN
        p50 = p99 = NAN
        if before is not None and elapsed is not None:
            rate_records = _increase(current.records, before.records) / elapsed
            rate_bytes = _increase(current.bytes, before.bytes) / elapsed
            p50, p99 = _quantiles(latency, before.latency)
        current.latency = latency
        return {
            "records_per_s": rate_records, "bytes_per_s": rate_bytes,
            "lag_records": float(sum(p.lag_records for p in parts.values())),
            "lag_seconds": max((p.lag_seconds for p in parts.values()), default=0.0),
            "p50": p50, "p99": p99,
        }

    def _sample_partitions(self, name: str, parts: Mapping[TopicPartition, PartitionNow]) -> None:
        store = self.partition_series.setdefault(name, {})
        for tp, p in parts.items():
            rings = self._series(store, tp, PARTITION_SERIES)
            rings["lag_records"].append(p.lag_records)
            rings["lag_seconds"].append(p.lag_seconds)
            rings["records_per_s"].append(p.records_per_s)
            rings["p99"].append(p.p99)
        for tp in [tp for tp in store if tp not in parts]:
            rings = store[tp]
            for ring in rings.values():
                ring.append(NAN)
            if all(r.empty() for r in rings.values()):
                del store[tp]


def finite(value: float, digits: int = 3) -> float | None:
    """A figure for JSON: rounded, or None for NaN and infinity."""
    return round(value, digits) if math.isfinite(value) else None


def series_json(rings: Mapping[str, Ring], digits: int = 3) -> dict[str, list[float | None]]:
    return {name: [round(v, digits) if v == v and not math.isinf(v) else None for v in ring.values()]
            for name, ring in rings.items()}
