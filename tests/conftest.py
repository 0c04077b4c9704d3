"""Session-wide real Kafka clusters (KRaft, started by mm2py.kafka_local) for integration tests.

Cluster work dirs live under ``test-logs/<run>/``; they are deleted after a green run and kept,
broker logs included, after a run with failures (the path is printed at the end).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mm2py.client.cluster import ClusterClient
from mm2py.kafka_local import KafkaCluster, start_all

sys.path.insert(0, str(Path(__file__).parent))

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / "test-logs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


class _Clusters:
    """Starts the session's clusters lazily, both at once the first time either is asked for."""

    def __init__(self) -> None:
        self.started: dict[str, KafkaCluster] = {}
        self.lock = threading.Lock()

    def get(self, *names: str, nodes: int = 1) -> list[KafkaCluster]:
        with self.lock:
            missing = [n for n in names if n not in self.started]
            created = [KafkaCluster.create(n, RUN_DIR / n, nodes=nodes) for n in missing]
            try:
                start_all(created, timeout=90)
            finally:
                for c in created:
                    self.started[c.name] = c
            return [self.started[n] for n in names]

    def stop_all(self) -> None:
        for c in self.started.values():
            c.stop()


_CLUSTERS = _Clusters()


@pytest.fixture(scope="session")
def clusters() -> Iterator[_Clusters]:
    yield _CLUSTERS


@pytest.fixture(scope="session")
def source_cluster(clusters: _Clusters) -> KafkaCluster:
    """Alias ``east``: the cluster mirrored FROM."""
    return clusters.get("east", "west")[0]


@pytest.fixture(scope="session")
def target_cluster(clusters: _Clusters) -> KafkaCluster:
    """Alias ``west``: the cluster mirrored TO."""
    return clusters.get("east", "west")[1]


@pytest.fixture(scope="session")
def east(source_cluster: KafkaCluster) -> KafkaCluster:
    return source_cluster


@pytest.fixture(scope="session")
def west(target_cluster: KafkaCluster) -> KafkaCluster:
    return target_cluster


@pytest.fixture
async def src(source_cluster: KafkaCluster) -> AsyncIterator[ClusterClient]:
    """A raw client of the source cluster."""
    async with ClusterClient(source_cluster.bootstrap) as c:
        yield c


@pytest.fixture
async def dst(target_cluster: KafkaCluster) -> AsyncIterator[ClusterClient]:
    """A raw client of the target cluster."""
    async with ClusterClient(target_cluster.bootstrap) as c:
        yield c


@pytest.fixture(scope="module")
def three_node_cluster() -> Iterator[KafkaCluster]:
    """A 3-broker cluster, only for tests where partition leadership matters (stopped after the module)."""
    cluster = KafkaCluster.create("trio", RUN_DIR / "trio", nodes=3)
    try:
        yield cluster.start(timeout=120)
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def tiered_source_cluster() -> Iterator[KafkaCluster]:
    """A 1-broker cluster with KIP-405 remote log storage (Kafka's LocalTieredStorage), only for
    tiered-storage tests (stopped after the module). Topics opt in with ``tiered_topic_config()``."""
    cluster = KafkaCluster.create("tiered", RUN_DIR / "tiered", tiered_storage=True)
    try:
        yield cluster.start(timeout=120)
    finally:
        cluster.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _CLUSTERS.stop_all()
    if not RUN_DIR.exists():
        return
    if session.testsfailed == 0 and exitstatus == 0:
        shutil.rmtree(RUN_DIR, ignore_errors=True)
        parent = RUN_DIR.parent
        if parent.exists() and not any(parent.iterdir()):
            parent.rmdir()
    else:
        logs = sorted(str(p) for p in RUN_DIR.glob("*/node-*/server.log"))
        sys.stderr.write("\nBroker logs of this failed run are kept:\n  " + "\n  ".join(logs) + "\n")
