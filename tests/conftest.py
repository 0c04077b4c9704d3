"""The run's real Kafka clusters (KRaft, started by mm2py.kafka_local), shared by every module.

Tests share clusters and use topics of their own (``helpers.unique``). Each cluster starts the
first time a test asks for it and stops at the end of the run. ``make test`` runs two
pytest-xdist workers, a test module at a time each (``--dist loadfile``: module fixtures such as a
Spark session stay one per module); each worker has clusters of its own:

- ``east`` and ``west``: the two-cluster mirror set-up (one node each). ``east`` also has KIP-405
  remote storage; a topic opts in with ``tiered_topic_config()``.
- ``trio``: three nodes, for tests where partition leadership matters.
- ``secured`` and ``secured_west``: TLS and SASL listeners and Kafka's standard authorizer, for
  the TLS, SASL and ACL tests (their SASL users are ``helpers.SASL_USERS``; the ``super_users`` bypass ACLs).

Cluster work dirs live under ``test-logs/<run>/``; they are deleted after a green run and kept,
broker logs included, after a run with failures (the path is printed at the end).

Hypothesis runs the ``ci`` profile (the full depth) unless ``HYPOTHESIS_PROFILE=dev`` asks for
the quicker one; see ``helpers.examples``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from helpers import SASL_USERS
from hypothesis import settings

from mm2py.client.cluster import ClusterClient
from mm2py.kafka_local import BrokerSecurity, KafkaCluster, start_all
from mm2py.kafka_local.cluster import PORTS_ENV, in_parallel

sys.path.insert(0, str(Path(__file__).parent))

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / "test-logs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"

# ``make test`` runs two pytest-xdist workers (gw0, gw1), each with clusters of its own: each
# takes its own range of ports, so that neither hands a broker a port the other just chose
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw"):
    _n = int(_WORKER[2:])
    os.environ[PORTS_ENV] = f"{20000 + 2000 * _n}-{20000 + 2000 * (_n + 1)}"

#: ``ci``: hypothesis's own depth (the tests' ``examples(n)`` give n); ``dev``: a tenth of it
settings.register_profile("ci", max_examples=100)
settings.register_profile("dev", max_examples=10)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: the principal of the client certificate that the secured clusters' TLS material includes
CLIENT_CERT_PRINCIPAL = "CN=mm2py-client"
SECURITY = BrokerSecurity(
    listeners=("SASL_SSL", "SSL", "SASL_PLAINTEXT"), plain_users=SASL_USERS,
    scram_users={"alice": SASL_USERS["alice"]}, authorizer=True,
    # reader and writer can do only what ACLs allow (the ACL sync tests)
    super_users=("alice", "mirror", CLIENT_CERT_PRINCIPAL),
)

#: how each cluster is created, and the clusters started together with it
SPECS: dict[str, dict[str, Any]] = {
    "east": {"tiered_storage": True},
    "west": {},
    "trio": {"nodes": 3},
    "secured": {"security": SECURITY},
    "secured-west": {"security": SECURITY},
    # room for eight fetch sessions (KIP-227), one in each of the broker's eight cache shards
    "scarce": {"broker_config": {"max.incremental.fetch.session.cache.slots": "8"}},
}
GROUPS = (("east", "west"), ("trio",), ("secured",), ("secured-west",), ("scarce",))


class _Clusters:
    """Starts a cluster the first time it is asked for, with the others of its group, in parallel."""

    def __init__(self, specs: Mapping[str, Mapping[str, Any]], groups: tuple[tuple[str, ...], ...]) -> None:
        self.specs, self.groups = specs, groups
        self.started: dict[str, KafkaCluster] = {}
        self.lock = threading.Lock()

    def get(self, name: str) -> KafkaCluster:
        with self.lock:
            if name not in self.started:
                group = next(g for g in self.groups if name in g)
                created = in_parallel(lambda n: KafkaCluster.create(n, RUN_DIR / n, **self.specs[n]), group)
                try:
                    start_all(created, timeout=120)
                finally:
                    for c in created:
                        self.started[c.name] = c
            return self.started[name]

    def stop_all(self) -> None:
        for c in self.started.values():
            c.stop()


_CLUSTERS = _Clusters(SPECS, GROUPS)


@pytest.fixture(scope="session")
def east() -> KafkaCluster:
    """The cluster mirrored FROM (remote storage on; topics opt in)."""
    return _CLUSTERS.get("east")


@pytest.fixture(scope="session")
def west() -> KafkaCluster:
    """The cluster mirrored TO."""
    return _CLUSTERS.get("west")


@pytest.fixture
async def src(east: KafkaCluster) -> AsyncIterator[ClusterClient]:
    """A raw client of the source cluster."""
    async with ClusterClient(east.bootstrap) as c:
        yield c


@pytest.fixture
async def dst(west: KafkaCluster) -> AsyncIterator[ClusterClient]:
    """A raw client of the target cluster."""
    async with ClusterClient(west.bootstrap) as c:
        yield c


@pytest.fixture
def trio() -> Iterator[KafkaCluster]:
    """The 3-broker cluster, with every node running before and after the test (a test may kill one)."""
    cluster = _CLUSTERS.get("trio")
    cluster.start()
    yield cluster
    cluster.start()


@pytest.fixture(scope="session")
def secured() -> KafkaCluster:
    """A secured cluster: SASL_SSL (PLAIN and SCRAM), SASL_PLAINTEXT, SSL with client certificates,
    the standard authorizer; PLAINTEXT too, for set-up and checks (``User:ANONYMOUS``, a super user)."""
    return _CLUSTERS.get("secured")


@pytest.fixture(scope="session")
def scarce() -> KafkaCluster:
    """A single-node cluster whose broker keeps eight fetch sessions at most (a test may restart it)."""
    cluster = _CLUSTERS.get("scarce")
    cluster.start()
    return cluster


@pytest.fixture(scope="session")
def secured_west() -> KafkaCluster:
    """A second secured cluster, set up like ``secured`` (a target for ACL sync)."""
    return _CLUSTERS.get("secured-west")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _CLUSTERS.stop_all()
    if not RUN_DIR.exists():
        return
    if session.testsfailed == 0 and exitstatus == 0:
        shutil.rmtree(RUN_DIR, ignore_errors=True)
        with contextlib.suppress(OSError):  # another worker's run dir may still be there
            RUN_DIR.parent.rmdir()
    else:
        logs = sorted(str(p) for p in RUN_DIR.glob("*/node-*/server.log"))
        sys.stderr.write("\nBroker logs of this failed run are kept:\n  " + "\n  ".join(logs) + "\n")
