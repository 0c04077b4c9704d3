"""A task's executor-side figures on the Spark driver, folded from its leases' reports and ends.

:class:`LeaseBook` keeps, for one task, what its ended leases did (summed) and each running lease's
latest report, and folds both into the driver's :class:`~.flow_runner.SparkTask` metrics, so
``/metrics`` and ``status()`` show executor work while a lease runs, not only when it ends.
Invariant: no counter goes down when a lease is lost (its last report stands for it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mm2py.engine.latency import PartitionTimes
from mm2py.engine.task_contract import RUN_COUNTERS
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.spark.driver.flow_runner import SparkTask
from mm2py.runtime.spark.executor.lease import LeaseResult
from mm2py.runtime.spark.lease_messages import Report

__all__ = ["LeaseBook"]


@dataclass
class LeaseBook:
    """A task's executor-side figures: ended leases summed, running leases' latest reports."""

    done: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RUN_COUNTERS, 0))
    done_codec: tuple[int, int] = (0, 0)
    done_times: dict[TopicPartition, PartitionTimes] = field(default_factory=dict)
    live: dict[str, Report] = field(default_factory=dict)
    #: each running lease's times, every partition's latest (a report carries the changed ones)
    live_times: dict[str, dict[TopicPartition, PartitionTimes]] = field(default_factory=dict)

    #: the times dict the last full fold gave its task (folds of a report then redo only the
    #: partitions it changed, in that same dict)
    _folded: dict[TopicPartition, PartitionTimes] | None = None

    def report(self, report: Report) -> None:
        self.live[report.lease] = report
        self.live_times.setdefault(report.lease, {}).update(report.times)

    def fold(self, task: SparkTask, changed: Iterable[TopicPartition] | None = None) -> None:
        """The task's figures: counters always; times of every partition, or only of ``changed``
        (a report's: the others' sums are as the last fold left them, thousands of partitions
        not added up again twice a second)."""
        for name in RUN_COUNTERS:
            value = self.done[name] + sum(r.metrics.get(name, 0) for r in self.live.values())
            setattr(task.metrics, name, value)
        if changed is not None and self._folded is not None and task.metrics.times is self._folded:
            times = self._folded
            for tp in changed:
                mine = times[tp] = PartitionTimes()
                for part in (self.done_times, *self.live_times.values()):
                    if tp in part:
                        mine.add(part[tp])
                        mine.lag_seconds = part[tp].lag_seconds
            return
        times = {}
        _add_times(times, self.done_times)
        for lease_times in self.live_times.values():
            _add_times(times, lease_times)  # a running lease knows the current lag
        task.metrics.times = self._folded = times

    def codec(self) -> tuple[int, int]:
        d, c = self.done_codec
        for r in self.live.values():
            d, c = d + r.codec[0], c + r.codec[1]
        return d, c

    def end(self, lease_id: str, result: LeaseResult | None) -> None:
        """The lease's job ended: its figures move from ``live`` to ``done``. A result that was
        never granted says nothing of the lease (a refused re-run of a lost one): its last
        report stands, so no counter goes down when a lease is lost."""
        live = self.live.pop(lease_id, None)
        live_times = self.live_times.pop(lease_id, {})
        if result is not None and (result.granted or live is None):  # the executor's final figures
            for name in RUN_COUNTERS:
                self.done[name] += int(getattr(result.metrics, name))
            _add_times(self.done_times, result.metrics.times)
            codec = result.codec
        elif live is not None:  # the job failed or was a refused re-run: its last report is all we know
            for name in RUN_COUNTERS:
                self.done[name] += live.metrics.get(name, 0)
            _add_times(self.done_times, live_times)
            codec = live.codec
        else:
            return
        self.done_codec = (self.done_codec[0] + codec[0], self.done_codec[1] + codec[1])


def _add_times(into: dict[TopicPartition, PartitionTimes],
               times: Mapping[TopicPartition, PartitionTimes]) -> None:
    """Add ``times``' observations; the lag in time is the one added last (the newest lease's)."""
    for tp, t in times.items():
        mine = into.setdefault(tp, PartitionTimes())
        mine.add(t)
        mine.lag_seconds = t.lag_seconds
