"""The run's real Kafka clusters (KRaft, started by mm2py.kafka_local), shared by every module.

Tests share clusters and use topics of their own (``tests.support.brokers.unique``). Each cluster starts the
first time a test asks for it and stops at the end of the run. ``make test`` runs five
pytest-xdist workers (``MM2PY_TEST_WORKERS``), a test module at a time each (``--dist loadfile``:
module fixtures such as a Spark session stay one per module); each worker has clusters of its own:

- ``east`` and ``west``: the two-cluster mirror set-up (one node each). ``east`` also has KIP-405
  remote storage; a topic opts in with ``tiered_topic_config()``.
- ``trio``: three nodes, for tests where partition leadership matters.
- ``secured`` and ``secured_west``: TLS and SASL listeners and Kafka's standard authorizer, for
  the TLS, SASL and ACL tests (their SASL users are ``tests.support.brokers.SASL_USERS``; the
  ``super_users`` bypass ACLs).

Cluster work dirs live under ``test-logs/<run>/``; they are deleted after a green run and kept,
broker logs included, after a run with failures (the path is printed at the end).

Hypothesis runs the ``ci`` profile (the full depth) unless ``HYPOTHESIS_PROFILE`` asks for ``dev``,
a tenth (a quicker local loop), or ``fallback``, the pure-Python pass of ``make test``; see
``tests.support.hypothesis_examples``.
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
from hypothesis import HealthCheck, settings

from mm2py.client.cluster import ClusterClient
from mm2py.kafka_local import BrokerSecurity, KafkaCluster, start_all
from mm2py.kafka_local.cluster import PORTS_ENV, in_parallel
from mm2py.kafka_local.jars import QUICK_JVM
from tests.support import native_calls
from tests.support.brokers import SASL_USERS, unique
from tests.support.connect_worker import ConnectWorker
from tests.support.tiered_storage import tiered_cluster

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / "test-logs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"

# ``make test`` runs five pytest-xdist workers (gw0-gw4), each with clusters of its own: each
# takes its own range of 2,000 ports, so that none hands a broker a port another just chose
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw"):
    _n = int(_WORKER[2:])
    os.environ[PORTS_ENV] = f"{20000 + 2000 * _n}-{20000 + 2000 * (_n + 1)}"

#: ``ci``: hypothesis's own depth (the tests' ``examples(n)`` give n); ``dev``: a tenth of it. No
#: wall-clock limits: ``make test`` runs the unit suite beside brokers and JVMs on two cores, where
#: generating or running one example can take a second (a test that guards against a hang says its
#: own ``deadline``)
_UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("ci", max_examples=100, **_UNTIMED)
settings.register_profile("dev", max_examples=10, **_UNTIMED)
#: the unit suite's second pass, on the pure-Python path (``make test``): the compiled and the
#: Python paths are compared at full depth in the first
settings.register_profile("fallback", max_examples=30, **_UNTIMED)
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
    "east": tiered_cluster(RUN_DIR / "east"),
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
                for c in created:  # test brokers live minutes: C1 only starts them with 40% less CPU
                    c.jvm_args.append(QUICK_JVM)
                try:
                    start_all(created, timeout=120)
                finally:
                    for c in created:
                        self.started[c.name] = c
            cluster = self.started[name]
            if not all(node.is_alive() for node in cluster.nodes):
                cluster.start()  # stopped after the tests that own it (see OWNED_BY)
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


_CLUSTERS = _Clusters(SPECS, GROUPS)


@pytest.fixture(scope="session")
def east() -> KafkaCluster:
    """The cluster mirrored FROM (remote storage on; topics opt in)."""
    return _CLUSTERS.get("east")


@pytest.fixture(scope="session")
def west() -> KafkaCluster:
    """The cluster mirrored TO."""
    return _CLUSTERS.get("west")


@pytest.fixture(scope="module")
def connect_worker(west: KafkaCluster) -> Iterator[ConnectWorker]:
    """Apache Kafka's own Kafka Connect worker (the real Mirror connectors) with its topics on
    ``west``, one per module that asks; its work dir sits beside the clusters' (kept, ``connect.log``
    included, after a failed run)."""
    worker = ConnectWorker.create(west.workdir.parent / unique("connect"), west.bootstrap)
    with worker:
        yield worker


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


#: modules that alone use a cluster (or the embedded Spark) run on one xdist worker together, so it
#: starts once
SHARED_CLUSTER = {"test_acl_sync": "secured", "test_oauth": "secured", "test_security": "secured",
                  "test_strimzi_resource": "secured",
                  "test_target_waits": "test_leadership",
                  "test_spark_runtime": "local-spark", "test_spark_halting": "local-spark"}
#: about how many seconds each slow group of tests takes (summed test durations of a full run on
#: this 2-core machine kind): the slowest start first, so that the workers finish together
#: instead of one starting the Spark cluster's tests last; the rest weigh 1
SLOW = {"test_spark_cluster": 170, "secured": 180, "local-spark": 160, "test_leadership": 135,
        "test_connect_differential": 75, "test_mm2_swap": 75, "test_audit": 45,
        "test_mirror_flow": 65, "test_ui_browser": 60, "test_harness": 40, "test_outage": 35,
        "test_incremental_fetch_broker": 35, "test_raw_client": 30, "test_tiered_storage": 30,
        "test_failback": 50}


def _group_of(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
    return SHARED_CLUSTER.get(module, module)


def _group(item: pytest.Item) -> str:
    return _group_of(item.nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with the modules of one SHARED_CLUSTER group as one unit of work, and
    the units in collection order (the slowest first, see below)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group_of(nodeid)

    config.option.loadscopereorder = False
    return ByGroup(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest units of work first."""
    items.sort(key=lambda item: -SLOW.get(_group(item), 1))  # stable: a module keeps its order


#: clusters that only one group of tests uses, stopped once its last test is done: an idle broker
#: still takes ~4% of a core (measured here), which the other worker's tests need
OWNED_BY = {"secured": ("secured", "secured-west"), "test_leadership": ("trio",),
            "test_incremental_fetch_broker": ("scarce",)}


#: the embedded SparkSession of the ``local-spark`` group, while it runs
_LOCAL_SPARK: list[Any] = []


@pytest.fixture(scope="session")
def local_spark() -> Iterator[Any]:
    """One embedded ``local[4]`` SparkSession for the modules of the ``local-spark`` group (a Spark
    JVM starts slowly): two tasks, each with a lease and room for its successor. Stopped once the
    group is done."""
    from mm2py.runtime.spark.driver.session import spark_session
    from tests.support.spark_cluster import driver_java_options

    session = spark_session("local[4]", app_name="mm2py-tests",
                            conf={"spark.driver.defaultJavaOptions": driver_java_options()})
    _LOCAL_SPARK.append(session)
    yield session
    _stop_local_spark()


def _stop_local_spark() -> None:
    while _LOCAL_SPARK:
        _LOCAL_SPARK.pop().stop()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    group = _group(item)
    if nextitem is not None and _group(nextitem) == group:
        return
    if group in OWNED_BY:
        _CLUSTERS.stop(OWNED_BY[group])
    if group == "local-spark":
        _stop_local_spark()


native_calls.install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A unit test that reached the compiled path's stand-ins carries ``native_path``
    (``tests.support.native_calls``: the pure-Python pass runs only those)."""
    before = native_calls.calls()
    yield
    native_calls.check(item, before)


#: ``MM2PY_TEST_TIMELINE=<file>``: each test's worker, start, end, CPU of the worker and of the child
#: processes it reaped meanwhile (a JVM the test started and stopped) appended there, one line
#: each, to see where a run's wall time and CPU go (``scripts/test_timeline.py`` reads it)
_TIMELINE = os.environ.get("MM2PY_TEST_TIMELINE")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not _TIMELINE:
        yield
        return
    start, before = time.time(), os.times()
    yield
    worker, after = os.environ.get("PYTEST_XDIST_WORKER", "main"), os.times()
    own = after.user + after.system - before.user - before.system
    reaped = after.children_user + after.children_system - before.children_user - before.children_system
    with open(_TIMELINE, "a") as out:
        out.write(f"{worker}\t{start:.2f}\t{time.time():.2f}\t{own:.2f}\t{reaped:.2f}\t{item.nodeid}\n")


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
