"""The suite's Kafka clusters: started on first use, each once, and stopped at the end of the run.

Two kinds:

- :class:`RunClusters`, ``east`` and ``west``: one pair for the whole run, used by the tests of
  every pytest-xdist worker at once. Tests share them safely because each uses topics, groups and
  source aliases of its own (``tests.support.brokers.unique``) and none stops them. The first
  process that asks starts the pair under a file lock and writes where it runs; the others read
  that. The process that started the run (xdist's controller, or the only process) stops them at
  its end: a worker may finish while others still use them. A broker costs ~2 CPU s to start and
  ~2% of a core idle, and the tests' work is the same on one pair as on one per worker.
- :class:`WorkerClusters`: clusters that tests stop, restart or fill with settings of their own
  (three nodes, security, a tiny fetch-session cache, a target to take down), one set per worker.
"""

from __future__ import annotations

import fcntl
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mm2py.kafka_local import KafkaCluster, start_all
from mm2py.kafka_local.cluster import in_parallel
from mm2py.kafka_local.jars import QUICK_JVM


def _create(specs: Mapping[str, Mapping[str, Any]], directory: Path,
            names: tuple[str, ...]) -> list[KafkaCluster]:
    created = in_parallel(lambda n: KafkaCluster.create(n, directory / n, **specs[n]), names)
    for c in created:  # test brokers live minutes: C1 only starts them with 40% less CPU
        c.jvm_args.append(QUICK_JVM)
    return created


class WorkerClusters:
    """A worker's own clusters: one starts the first time it is asked for, with the others of its
    group, in parallel; a cluster a test stopped is started again when next asked for."""

    def __init__(self, specs: Mapping[str, Mapping[str, Any]], groups: tuple[tuple[str, ...], ...],
                 directory: Path) -> None:
        self.specs, self.groups, self.directory = specs, groups, directory
        self.started: dict[str, KafkaCluster] = {}
        self.lock = threading.Lock()

    def get(self, name: str) -> KafkaCluster:
        with self.lock:
            if name not in self.started:
                created = _create(self.specs, self.directory, next(g for g in self.groups if name in g))
                try:
                    start_all(created, timeout=120)
                finally:
                    for c in created:
                        self.started[c.name] = c
            cluster = self.started[name]
            if not all(node.is_alive() for node in cluster.nodes):
                cluster.start()  # stopped after the tests that own it
            return cluster

    def stop(self, names: tuple[str, ...]) -> None:
        """Stop these clusters (if started); a later ``get`` starts them again."""
        with self.lock:
            for name in names:
                if name in self.started:
                    self.started[name].stop()

    def stop_all(self) -> None:
        for c in self.started.values():
            c.stop()


class RunClusters:
    """Clusters of the whole run, shared by its processes (see the module's docstring)."""

    def __init__(self, specs: Mapping[str, Mapping[str, Any]], directory: Path) -> None:
        self.specs, self.directory = specs, directory
        self.state = directory / "clusters.json"
        self.known: dict[str, KafkaCluster] = {}
        self.lock = threading.Lock()

    def get(self, name: str) -> KafkaCluster:
        with self.lock:
            if not self.known:
                self.known = self._start_or_find()
            cluster = self.known[name]
        down = [n.node_id for n in cluster.nodes if not n.is_alive()]
        if down:  # nothing stops them before the run ends: a broker of theirs died
            raise AssertionError(f"node(s) {down} of the run's shared cluster {name} are down; "
                                 f"logs: {', '.join(map(str, cluster.log_files))}")
        return cluster

    def _start_or_find(self) -> dict[str, KafkaCluster]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / "clusters.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not self.state.exists():
                created = _create(self.specs, self.directory, tuple(self.specs))
                try:
                    start_all(created, timeout=120)
                except BaseException:
                    for c in created:
                        c.stop()
                    raise
                self.state.write_text(json.dumps([c.to_record() for c in created]))
            return {r["name"]: KafkaCluster.from_record(r) for r in json.loads(self.state.read_text())}

    def stop_all(self) -> None:
        """Stop them if any process of the run started them (the run's first process calls this at
        its end, when no test runs any more)."""
        if self.state.exists():
            for record in json.loads(self.state.read_text()):
                KafkaCluster.from_record(record).stop()
