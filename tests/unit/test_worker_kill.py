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


def test_each_hosts_fetch_rate_is_named_with_the_worker_it_ran_on() -> None:
    from own_requests import host_rates, own_rates

    before = {("", "", "src1", "Fetch"): 10.0, ("host-0", "box:301", "src1", "Fetch"): 100.0,
              ("host-1", "box:402", "src1", "Fetch"): 50.0, ("host-1", "box:402", "dst1", "Produce"): 7.0}
    at_kill = {("", "", "src1", "Fetch"): 12.0, ("host-0", "box:301", "src1", "Fetch"): 300.0,
               ("host-1", "box:402", "src1", "Fetch"): 250.0, ("host-1", "box:402", "dst1", "Produce"): 57.0}
    end = {("", "", "src1", "Fetch"): 14.0, ("host-1", "box:402", "src1", "Fetch"): 650.0,
           ("host-2", "box:503", "src1", "Fetch"): 40.0}  # host-0 died; host-2 started after the kill
    assert own_rates(before, at_kill, 10.0, "src1") == {"source Fetch": 40.2, "target Produce": 5.0}
    kill = WorkerKill("worker-1", 100.0, {}, daemon_workers={301: "worker-1", 402: "worker-2"})
    kill.fetch_until = host_rates(before, at_kill, 10.0, "src1")
    kill.fetch_after = host_rates(at_kill, end, 20.0, "src1")
    assert kill.fetch_until == {("host-0", "box:301"): 20.0, ("host-1", "box:402"): 20.0}
    assert kill.fetch_after == {("host-1", "box:402"): 20.0, ("host-2", "box:503"): 2.0}
    summary = kill.summary("spark")
    assert summary.endswith("per mirror host until the kill: host-0 on worker-1 20.0, host-1 on worker-2 "
                            "20.0; source Fetch/s per mirror host after it: host-1 on worker-2 20.0, "
                            "host-2 on a later worker 2.0")
