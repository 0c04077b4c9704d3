"""The operator page's memory: a few figures of every flow and partition, sampled every few seconds.

A :class:`Sampler` reads what the worker already keeps (each task's counters, its partitions' lag
and latency histograms, the in-process runtime's acknowledged positions) at every sample, on the
event loop, between the tasks' steps: nothing is added to the mirror's data path. The arithmetic
of a sample is done on arrays (numpy), a flow's partitions at once, so that a sample of 2,000
partitions stays a few milliseconds of the loop.

Each figure is kept for ``window / interval`` samples (15 min at 5 s: 180) as 4-byte floats, NaN
where it had no value (a flow paused, a partition not yet assigned): **720 bytes per series** at
the defaults. A flow has :data:`FLOW_SERIES` (6 series, 4.3 KB; a :class:`Ring` each), a partition
:data:`PARTITION_SERIES` (4 series, 2.9 KB: 5.8 MB for 2,000 partitions; a flow's partitions share
one ring of frames, :class:`PartitionRings`). What has no value left in the window (a removed
flow, a partition not mirrored for 15 minutes) is dropped, so memory stays bounded by what ran
in the window.

Rates are per second between two samples (a counter that went down — a restarted flow's fresh
tasks — counts from zero). Latency quantiles are those of the batches acknowledged between two
samples (the histograms' difference), as the upper bound of their bucket (``LATENCY_BUCKETS``;
above the last one: :data:`BEYOND`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mm2py.engine.latency import LATENCY_BUCKETS
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.flows import FlowRunnerBase

__all__ = ["BEYOND", "FLOW_SERIES", "PARTITION_SERIES", "FlowNow", "PartitionRings", "Ring", "Sampler"]

log = logging.getLogger(__name__)

NAN = float("nan")
#: a flow's series: records and bytes per second, lag (sum of records, the largest in seconds),
#: replication latency p50/p99 of the batches acknowledged since the previous sample
FLOW_SERIES = ("records_per_s", "bytes_per_s", "lag_records", "lag_seconds", "p50", "p99")
#: a partition's series (records per second: acknowledged source offsets, where the runtime tells)
PARTITION_SERIES = ("lag_records", "lag_seconds", "records_per_s", "p99")
#: a latency quantile above the last bucket's bound (300 s) reads as twice that bound (the page
#: shows "> 5 min")
BEYOND = 2 * LATENCY_BUCKETS[-1]
_BOUNDS = np.array([*LATENCY_BUCKETS, BEYOND])
_NO_COUNTS = [0] * (len(LATENCY_BUCKETS) + 1)


class Ring:
    """The last ``capacity`` values of a series, as 4-byte floats (NaN: no value at that sample)."""

    __slots__ = ("_count", "_values")

    def __init__(self, capacity: int, count: int = 0, typecode: str = "f") -> None:
        """``count``: samples taken before this series existed (they read as NaN)."""
        self._values = array(typecode, [NAN]) * capacity
        self._count = count

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

    def empty(self) -> bool:
        """No value in the window (every slot NaN)."""
        return all(v != v for v in self._values)


class PartitionRings:
    """The series of a flow's partitions: one ring of frames (series x partitions, float32)."""

    def __init__(self, capacity: int, count: int = 0) -> None:
        self.index: dict[TopicPartition, int] = {}
        self.frames = np.full((capacity, len(PARTITION_SERIES), 0), np.nan, dtype=np.float32)
        self.count = count

    @property
    def nbytes(self) -> int:
        return int(self.frames.nbytes)

    def append(self, partitions: Sequence[TopicPartition], values: np.ndarray) -> None:
        """``values``: one row per series of :data:`PARTITION_SERIES`, a column per partition."""
        new = [tp for tp in partitions if tp not in self.index]
        if new:
            for tp in new:
                self.index[tp] = len(self.index)
            grown = np.full((*self.frames.shape[:2], len(new)), np.nan, dtype=np.float32)
            self.frames = np.concatenate([self.frames, grown], axis=2)
        frame = np.full(self.frames.shape[1:], np.nan, dtype=np.float32)
        if partitions:
            frame[:, [self.index[tp] for tp in partitions]] = values
        self.frames[self.count % len(self.frames)] = frame
        self.count += 1
        if len(partitions) < len(self.index):
            self._forget()

    def _forget(self) -> None:
        """Drop the partitions without a value left in the window."""
        alive = ~np.asarray(np.isnan(self.frames).all(axis=(0, 1)), dtype=bool)
        if alive.all():
            return
        kept = [tp for tp, column in sorted(self.index.items(), key=lambda kv: kv[1]) if alive[column]]
        self.frames = self.frames[:, :, alive]
        self.index = {tp: i for i, tp in enumerate(kept)}

    def series(self, tp: TopicPartition) -> dict[str, list[float]] | None:
        """One partition's series, oldest first (None: none of it in the window)."""
        column = self.index.get(tp)
        if column is None:
            return None
        cap = len(self.frames)
        rows = np.arange(self.count - min(self.count, cap), self.count) % cap
        data = self.frames[rows, :, column]
        return {name: data[:, k].tolist() for k, name in enumerate(PARTITION_SERIES)}


@dataclass
class FlowNow:
    """A flow's partitions at the latest sample: arrays in the order of ``partitions``."""

    partitions: list[TopicPartition]
    tasks: np.ndarray
    lag_records: np.ndarray
    lag_seconds: np.ndarray
    records_per_s: np.ndarray
    p50: np.ndarray
    p99: np.ndarray


@dataclass
class _Reading:
    """What one sample read of a flow (the next sample's "before")."""

    records: float
    bytes: float
    partitions: list[TopicPartition]
    counts: np.ndarray  # latency histogram counts, a row per partition
    positions: np.ndarray  # acknowledged positions (-1: unknown)


def _increase(now: float, before: float) -> float:
    """A counter's increase; one that went down was reset (fresh tasks) and counts from zero."""
    return now - before if now >= before else now


def quantiles(counts: np.ndarray, q: float) -> np.ndarray:
    """The ``q`` quantile of each row of histogram counts: the upper bound of the bucket holding
    it (as ``Histogram.quantile``; :data:`BEYOND` past the last bound), NaN for an empty row."""
    running = counts.cumsum(axis=1)
    total = running[:, -1]
    hit = (running >= (q * total)[:, None]) & (running > 0)
    out = _BOUNDS[hit.argmax(axis=1)].astype(np.float64)
    out[total == 0] = np.nan
    return out


def _aligned(before: _Reading, partitions: list[TopicPartition]) -> tuple[np.ndarray, np.ndarray]:
    """The previous reading's counts and positions in the order of ``partitions`` (zeros and -1
    for a partition it did not have)."""
    if before.partitions == partitions:
        return before.counts, before.positions
    where = {tp: i for i, tp in enumerate(before.partitions)}
    counts = np.zeros((len(partitions), len(_NO_COUNTS)), dtype=np.int64)
    positions = np.full(len(partitions), -1, dtype=np.int64)
    for i, tp in enumerate(partitions):
        j = where.get(tp)
        if j is not None:
            counts[i], positions[i] = before.counts[j], before.positions[j]
    return counts, positions


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
        self.partition_series: dict[str, PartitionRings] = {}
        self.now: dict[str, dict[str, float]] = {}
        self.partitions_now: dict[str, FlowNow] = {}
        self._before: dict[str, _Reading] = {}
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
            try:
                self.sample()
            except Exception:  # a figure read amiss must not end the page's history
                log.exception("operator page: a sample failed; sampling goes on")
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

    def _absent(self, name: str) -> None:
        """A flow gone from the worker: its series run on as NaN until the window forgets it."""
        self.now.pop(name, None)
        self.partitions_now.pop(name, None)
        self._before.pop(name, None)
        for ring in self.flow_series[name].values():
            ring.append(NAN)
        self.partition_series[name].append([], np.empty((len(PARTITION_SERIES), 0)))
        if all(r.empty() for r in self.flow_series[name].values()):
            del self.flow_series[name], self.partition_series[name]

    def _read(self, runner: FlowRunnerBase[Any]) -> tuple[_Reading, list[int], list[float], list[float]]:
        """One pass over the flow's tasks: counters, and per partition its task, lag, lag in time,
        latency counts and acknowledged position."""
        partitions: list[TopicPartition] = []
        owners: list[int] = []
        lags: list[float] = []
        lag_seconds: list[float] = []
        counts: list[list[int]] = []
        positions: list[int] = []
        records = size = 0.0
        for task_id, task in list(runner.tasks.items()):
            m = task.metrics
            records += m.records
            size += m.bytes
            read = getattr(task, "positions", None)  # the in-process TaskRunner's; Spark's: none
            acked = read() if callable(read) else {}
            for tp in task.partitions:
                times = m.times.get(tp)
                partitions.append(tp)
                owners.append(task_id)
                lags.append(m.lag.get(tp, 0))
                lag_seconds.append(times.lag_seconds if times is not None else 0.0)
                counts.append(times.replication.counts if times is not None else _NO_COUNTS)
                positions.append(acked.get(tp, -1))
        reading = _Reading(records, size, partitions,
                           np.array(counts, dtype=np.int64).reshape(len(partitions), len(_NO_COUNTS)),
                           np.array(positions, dtype=np.int64))
        return reading, owners, lags, lag_seconds

    def _sample_flow(self, name: str, runner: FlowRunnerBase[Any], elapsed: float | None) -> None:
        reading, owners, lags, lag_seconds = self._read(runner)
        before = self._before.get(name)
        n = len(reading.partitions)
        rates = np.full(n, np.nan)
        p50 = p99 = np.full(n, np.nan)
        figures = {"records_per_s": NAN, "bytes_per_s": NAN, "p50": NAN, "p99": NAN}
        if before is not None and elapsed is not None:
            counts, positions = _aligned(before, reading.partitions)
            delta = reading.counts - counts
            reset = (delta < 0).any(axis=1)
            delta[reset] = reading.counts[reset]  # fresh tasks: their histograms start again
            p50, p99 = quantiles(delta, 0.5), quantiles(delta, 0.99)
            known = (positions >= 0) & (reading.positions >= 0)
            rates[known] = np.maximum(reading.positions[known] - positions[known], 0) / elapsed
            flow = delta.sum(axis=0, keepdims=True)
            figures = {"records_per_s": _increase(reading.records, before.records) / elapsed,
                       "bytes_per_s": _increase(reading.bytes, before.bytes) / elapsed,
                       "p50": float(quantiles(flow, 0.5)[0]), "p99": float(quantiles(flow, 0.99)[0])}
        self._before[name] = reading
        current = FlowNow(reading.partitions, np.array(owners), np.array(lags, dtype=np.float64),
                          np.array(lag_seconds, dtype=np.float64), rates, p50, p99)
        self.partitions_now[name] = current
        figures["lag_records"] = float(current.lag_records.sum())
        figures["lag_seconds"] = float(current.lag_seconds.max()) if n else 0.0
        self.now[name] = figures
        rings = self.flow_series.get(name)
        if rings is None:
            rings = self.flow_series[name] = {k: Ring(self.capacity, self.count) for k in FLOW_SERIES}
        for key, ring in rings.items():
            ring.append(figures[key])
        table = self.partition_series.get(name)
        if table is None:
            table = self.partition_series[name] = PartitionRings(self.capacity, self.count)
        table.append(reading.partitions, np.vstack([current.lag_records, current.lag_seconds, rates, p99]))


def finite(value: float, digits: int = 3) -> float | None:
    """A figure for JSON: rounded, or None for NaN and infinity."""
    return round(value, digits) if math.isfinite(value) else None


def series_json(series: Mapping[str, Sequence[float]], digits: int = 3) -> dict[str, list[float | None]]:
    return {name: [round(v, digits) if math.isfinite(v) else None for v in values]
            for name, values in series.items()}
