"""``scale_bench.py --kill-worker-at``: one Spark worker SIGKILLed under traffic, and what it cost.

Not a test. On a standalone cluster of two or more workers (``--spark-workers``), a Spark peer's
window is interrupted at a given second by SIGKILLing one worker with its executor and mirror host
(``SparkStandaloneCluster.kill_worker``: all at once, as when its machine fails). The driver re-leases
the lost host's partitions on the surviving hosts once their fence lapses. Measured:

- each worker's executors' CPU over the window until the kill (both hosts mirrored);
- the outage: over the sampled partitions' records that reached the target after the kill, the
  longest wait counted from the kill (or from the record's send, if later): how long the killed
  host's partitions were without a mirror;
- how many sampled partitions had a record wait longer than ``SLOW_S`` after the kill (the killed
  host's share of the sample).
- each mirror host's own source Fetch/s (``mm2py_host_requests_total`` on the driver's /metrics)
  from before the window to the kill, and from the kill to the window's end (the survivor's, and
  a host started after the kill counted from 0), each named with the worker it ran on.

The killed processes' CPU until the kill stays in the peer's window CPU (``gone_parts``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from bench_support import cpu_seconds, process_role
from latency_support import Received

__all__ = ["SLOW_S", "WorkerKill", "executors_cpu", "kill_first_worker"]

#: a record that waited longer than this after the kill counts its partition as the killed host's
SLOW_S = 1.0


@dataclass
class WorkerKill:
    victim: str  # the worker's name (``worker-1``)
    at: float  # epoch s, just before the SIGKILL
    window_cpu: dict[str, float]  # worker -> its executors' CPU s from the window's start to the kill
    gone_parts: dict[str, float] = field(default_factory=dict)  # the killed processes' CPU by role
    outage_s: float | None = None
    slow_partitions: int = 0
    partitions: int = 0  # sampled partitions with a record that arrived after the kill
    #: Python daemon pid -> its worker, at the kill (a host's executor label ends with that pid)
    daemon_workers: dict[int, str] = field(default_factory=dict)
    #: (host, executor) -> its source Fetch/s until the kill, and from the kill to the window's end
    fetch_until: dict[tuple[str, str], float] = field(default_factory=dict)
    fetch_after: dict[tuple[str, str], float] = field(default_factory=dict)

    def measure(self, received: Received, where: dict[int, tuple[str, int]]) -> None:
        """The outage and the slow partitions, from the sampled records seen (``Received.first``);
        ``where``: each sampled record's source partition, by sequence number."""
        at_us, waits = int(self.at * 1e6), dict[tuple[str, int], float]()
        for seq in where.keys() & received.first.keys():
            sent, latency, _ = received.first[seq]
            if sent + latency > at_us:
                wait = (sent + latency - max(sent, at_us)) / 1e6
                waits[where[seq]] = max(wait, waits.get(where[seq], 0.0))
        self.partitions = len(waits)
        self.outage_s = max(waits.values(), default=None)
        self.slow_partitions = sum(1 for w in waits.values() if w > SLOW_S)

    def summary(self, peer: str) -> str:
        cpu = ", ".join(f"{w} {c:.1f}" for w, c in sorted(self.window_cpu.items()))
        outage = "-" if self.outage_s is None else f"{self.outage_s:.1f} s"
        fetch = "".join(f"; source Fetch/s per mirror host {when}: {self.rates(rates)}"
                        for when, rates in (("until the kill", self.fetch_until),
                                            ("after it", self.fetch_after)) if rates)
        return (f"{peer}: {self.victim} SIGKILLed with its executor and mirror host; window CPU s "
                f"by worker until then: {cpu}; after the kill the longest wait of a sampled record "
                f"was {outage}, longer than {SLOW_S:g} s in {self.slow_partitions} of the "
                f"{self.partitions} sampled partitions{fetch}")

    def rates(self, rates: dict[tuple[str, str], float]) -> str:
        return ", ".join(f"{host} on {self.worker_of(executor)} {rate:,.1f}"
                         for (host, executor), rate in rates.items())

    def worker_of(self, executor: str) -> str:
        """The worker a host ran on, from its executor label (``hostname:daemon pid``)."""
        pid = executor.rpartition(":")[2]
        return self.daemon_workers.get(int(pid), "a later worker") if pid.isdigit() else "?"


def _executor_processes(spark: Any) -> list[tuple[str, int, float]]:
    """(worker name, pid, CPU s) of each live process the applications' executors run (JVMs,
    Python daemons, hosts), each looked up once."""
    out = []
    for app in spark.active_apps():
        app_id = str(app["id"])
        for pid in spark.app_processes(app_id):
            worker, cpu = spark.worker_running(app_id, pid), cpu_seconds(pid)
            if worker is not None and cpu is not None:
                out.append((worker, pid, cpu))
    return out


def _by_worker(processes: list[tuple[str, int, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for worker, _, cpu in processes:
        out[worker] = out.get(worker, 0.0) + cpu
    return out


def executors_cpu(spark: Any) -> dict[str, float]:
    """Worker name -> CPU s of the processes its executors run (JVMs, Python daemons, hosts)."""
    return _by_worker(_executor_processes(spark))


def kill_first_worker(spark: Any, at_window_start: dict[str, float]) -> WorkerKill:
    """SIGKILL the cluster's first worker running an executor of an application."""
    processes = _executor_processes(spark)
    now = _by_worker(processes)
    if not now:
        raise RuntimeError("no Spark worker runs an executor: nothing to kill")
    victim = next(w.name for w in spark.workers if w.name in now)
    gone: dict[str, float] = {}
    for worker, pid, cpu in processes:
        if worker == victim:
            role = process_role(pid)
            gone[role] = gone.get(role, 0.0) + cpu
    kill = WorkerKill(victim, time.time(), {w: c - at_window_start.get(w, 0.0) for w, c in now.items()},
                      gone, daemon_workers={pid: worker for worker, pid, _ in processes})
    spark.kill_worker(victim)
    return kill
