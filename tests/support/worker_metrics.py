"""What a running worker's ``/metrics`` says, read from its collector in-process (no HTTP)."""

from __future__ import annotations

from typing import Any

from prometheus_client.core import CollectorRegistry

from mm2py.runtime.metrics import WorkerCollector


def partitions_flagged(worker: Any, family: str) -> set[tuple[str, str, str]]:
    """(topic, partition, cause) of every sample of the per-partition gauge ``family`` (for example
    ``mm2py_partition_refused``) that is 1."""
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker, partition_times=False))
    return {(s.labels["topic"], s.labels["partition"], s.labels["cause"])
            for f in registry.collect() if f.name == family for s in f.samples if s.value == 1.0}


def samples(worker: Any, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample named ``name`` (a family's, or a counter's ``_total``): its labels -> value."""
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker, partition_times=False))
    return {tuple(sorted(s.labels.items())): s.value
            for f in registry.collect() for s in f.samples if s.name == name}
