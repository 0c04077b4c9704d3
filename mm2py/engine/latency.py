"""Time-based figures of a mirror task: replication latency and record age (pure, no I/O).

As MirrorMaker 2 defines them (``MirrorSourceMetrics``): **record age** is the time between a
record's timestamp and its fetch from the source; **replication latency** is the time between a
record's timestamp and the target's acknowledgement of it. mm2py copies whole batches, so it
measures once per batch with the batch's ``maxTimestamp`` — the newest record's timestamp, or the
source broker's append time for ``LogAppendTime`` topics: the figure of the batch's last record,
which is a lower bound for the records before it in the same batch (they waited for it in the
source producer's linger). Record age is measured per fetched batch, replication latency per
batch the target acknowledged (a merged batch of small source batches counts once, with the
``maxTimestamp`` of its newest record). Batches without timestamps (-1) are not measured; a
timestamp in the future (clock skew) counts as 0.

Figures are kept as fixed-bucket histograms, cheap to update on the data path and to add up
(Spark leases report theirs to the driver).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

from mm2py.protocol import native
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

__all__ = ["LATENCY_BUCKETS", "Histogram", "PartitionTimes", "observe_acks", "observe_fetch"]

#: upper bounds in seconds: from loopback (a millisecond) to a stuck mirror (minutes)
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
)


@dataclass
class Histogram:
    """Observations counted per bucket (``counts[i]``: values <= ``LATENCY_BUCKETS[i]`` and above
    the previous bound; the last count is above every bound) and their sum."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds

    def add_counts(self, counts: Sequence[int], total: float) -> None:
        """Add observations counted elsewhere (``counts`` per bucket, ``total`` their sum)."""
        self.counts = [a + b for a, b in zip(self.counts, counts, strict=True)]
        self.total += total

    @property
    def count(self) -> int:
        return sum(self.counts)

    def add(self, other: Histogram) -> None:
        self.add_counts(other.counts, other.total)

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus' ``le`` buckets: (bound, observations at or below it), ``+Inf`` last."""
        out, running = [], 0
        for bound, n in zip([*map(str, LATENCY_BUCKETS), "+Inf"], self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out

    def quantile(self, q: float) -> float:
        """The upper bound of the bucket holding the ``q`` quantile (``inf`` past the last bound)."""
        rank, running = q * self.count, 0
        for i, n in enumerate(self.counts):
            running += n
            if running >= rank and running > 0:
                return LATENCY_BUCKETS[i] if i < len(LATENCY_BUCKETS) else float("inf")
        return 0.0

    @classmethod
    def of(cls, counts: Sequence[int], total: float) -> Histogram:
        if len(counts) != len(LATENCY_BUCKETS) + 1 or any(c < 0 for c in counts):
            raise ValueError(f"a latency histogram has {len(LATENCY_BUCKETS) + 1} non-negative counts")
        return cls(list(counts), float(total))


@dataclass
class PartitionTimes:
    """One partition's time-based figures."""

    replication: Histogram = field(default_factory=Histogram)  # timestamp -> target ack
    age: Histogram = field(default_factory=Histogram)  # timestamp -> fetched from the source
    #: how far behind in time: the age of the newest record fetched when it was fetched, while
    #: there was more to fetch (0 once a fetch reached the end of the partition)
    lag_seconds: float = 0.0

    def add(self, other: PartitionTimes) -> None:
        """Add ``other``'s observations; the lag in time is the larger of the two."""
        self.replication.add(other.replication)
        self.age.add(other.age)
        self.lag_seconds = max(self.lag_seconds, other.lag_seconds)


def observe_fetch(times: MutableMapping[TopicPartition, PartitionTimes], tp: TopicPartition,
                  batches: Sequence[RecordBatch], behind: bool, now: float) -> None:
    """``batches`` of ``tp`` were fetched at ``now`` (wall clock, seconds); ``behind``: the
    partition has more after them. Records their age and the partition's lag in time."""
    t = times.get(tp)
    if t is None:
        t = times[tp] = PartitionTimes()
    counted = (native.batch_ages(batches, now, LATENCY_BUCKETS)
               if type(batches) is list and len(batches) > 1 else None)  # one: observed as below
    if counted is not None:  # the compiled path: the same counts, without a Python step per batch
        t.age.add_counts(*counted)
    else:
        for b in batches:
            if b.max_timestamp >= 0:
                t.age.observe(now - b.max_timestamp / 1000)
    newest = batches[-1].max_timestamp if batches else -1
    if not behind:
        t.lag_seconds = 0.0
    elif newest >= 0:
        t.lag_seconds = max(0.0, now - newest / 1000)


def observe_acks(times: Mapping[TopicPartition, PartitionTimes], acked: Iterable[tuple[TopicPartition, int]],
                 now: float) -> None:
    """The target acknowledged at ``now`` the batches ``acked``: (source partition, the produced
    batch's ``maxTimestamp``) each."""
    for tp, ts in acked:
        t = times.get(tp)
        if ts >= 0 and t is not None:
            t.replication.observe(now - ts / 1000)
