"""benchmarks/worker_kill.py's measure: how long a killed Spark worker's partitions went without a
mirror, from the sampled records' send and arrival times (pure)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from latency_support import Received
from worker_kill import WorkerKill

S = 1_000_000  # µs


def _record(received: Received, seq: int, sent_s: float, arrived_s: float, partition: int) -> None:
    received.first[seq] = (int(sent_s * S), int((arrived_s - sent_s) * S), partition)


def test_the_outage_counts_from_the_kill_or_the_later_send_per_source_partition() -> None:
    received = Received()
    # ("a", 0), the killed host's: one record before the kill, two that waited for the new lease
    _record(received, 1, 99.0, 99.05, 0)
    _record(received, 2, 99.9, 108.0, 0)  # in flight at the kill: 8 s from the kill
    _record(received, 3, 100.5, 107.5, 0)  # sent after it: 7 s from its send
    # ("b", 0), the same partition number in another topic, on the surviving host
    _record(received, 4, 100.2, 100.25, 0)
    # a record the sample does not hold is not counted
    _record(received, 5, 100.1, 130.0, 3)
    kill = WorkerKill("worker-1", 100.0, {"worker-1": 1.0, "worker-2": 1.5})
    kill.measure(received, {1: ("a", 0), 2: ("a", 0), 3: ("a", 0), 4: ("b", 0), 6: ("c", 1)})
    assert kill.outage_s is not None and abs(kill.outage_s - 8.0) < 1e-3
    assert (kill.slow_partitions, kill.partitions) == (1, 2)
    assert "worker-1 SIGKILLed" in kill.summary("spark") and "8.0 s" in kill.summary("spark")


def test_no_record_after_the_kill_measures_no_outage() -> None:
    received = Received()
    _record(received, 1, 10.0, 10.1, 0)
    kill = WorkerKill("worker-1", 100.0, {})
    kill.measure(received, {1: ("a", 0)})
    assert kill.outage_s is None and kill.partitions == 0
