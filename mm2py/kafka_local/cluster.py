"""Start and stop real Apache Kafka KRaft clusters on loopback, one JVM per node.

Each node is a combined broker+controller (``process.roles=broker,controller``) with its own data
directory and ``server.log``. Clusters of one node serve most tests; three nodes serve tests where
partition leadership matters.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from .class_archive import class_archive_args
from .jars import KAFKA_VERSION, HarnessError, java_executable, resolve_jars
from .layout import LOG4J2, KafkaNode, add_listeners, format_storage, random_id, server_properties
from .security import BrokerSecurity, TlsFiles, broker_properties, generate_tls_files, scram_format_args

#: ports handed out by free_port in this process (never twice: clusters are created in parallel)
_HANDED_OUT: set[int] = set()
_PORTS_LOCK = threading.Lock()
#: below Linux's ephemeral range (32768-60999): a port the kernel gives no outgoing connection, so
#: no client of another cluster takes it between the choice and the broker's bind
_PORT_RANGE = (20000, 32000)
#: ``LO-HI``: the ports of this process's clusters (processes that start clusters side by side,
#: such as parallel test workers, each take a range of their own)
PORTS_ENV = "MM2PY_LOCAL_PORTS"


def _port_range() -> tuple[int, int]:
    spec = os.environ.get(PORTS_ENV)
    if not spec:
        return _PORT_RANGE
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi)


def free_port() -> int:
    """A loopback port that nothing listens on now, outside the ephemeral range (or in the range
    ``MM2PY_LOCAL_PORTS`` names), not handed out before by this process."""
    with _PORTS_LOCK:
        span = _port_range()
        for _ in range(200):
            port = random.randrange(*span)
            if port in _HANDED_OUT:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            return port
    raise HarnessError(f"no free loopback port in {span}")


T = TypeVar("T")
R = TypeVar("R")


@dataclass
class KafkaCluster:
    """A running (or stopped) local KRaft cluster. ``bootstrap`` is what clients connect to."""

    name: str
    workdir: Path
    nodes: list[KafkaNode] = field(default_factory=list)
    cluster_id: str = ""
    version: str = KAFKA_VERSION
    #: TLS material of a cluster created with secured listeners
    tls: TlsFiles | None = None
    #: Maven profile of extra broker jars (``tiered``: KIP-405 remote storage, see ``create``)
    jar_profile: str | None = None
    #: extra JVM options for every node's ``java`` command (a benchmark's JMX agent, say)
    jvm_args: list[str] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        """The PLAINTEXT listeners (every cluster has them)."""
        return ",".join(n.address for n in self.nodes)

    def bootstrap_for(self, protocol: str) -> str:
        """The listeners of one secured protocol (``SASL_SSL``, ``SASL_PLAINTEXT``, ``SSL``)."""
        if protocol == "PLAINTEXT":
            return self.bootstrap
        if any(protocol not in n.secured_ports for n in self.nodes):
            raise HarnessError(f"{self.name} has no {protocol} listener")
        return ",".join(f"127.0.0.1:{n.secured_ports[protocol]}" for n in self.nodes)

    @property
    def log_files(self) -> list[Path]:
        return [n.log_file for n in self.nodes]

    def __str__(self) -> str:
        return f"{self.name} ({self.bootstrap})"

    def to_record(self) -> dict[str, object]:
        """A JSON-able description, so another process can find (and stop) this cluster."""
        return {
            "name": self.name, "workdir": str(self.workdir), "cluster_id": self.cluster_id,
            "version": self.version, "tls": None if self.tls is None else str(self.tls.directory),
            "jar_profile": self.jar_profile,
            "nodes": [
                {"node_id": n.node_id, "port": n.port, "controller_port": n.controller_port,
                 "workdir": str(n.workdir), "pid": n.pid, "secured_ports": n.secured_ports}
                for n in self.nodes
            ],
        }

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> KafkaCluster:
        nodes = record["nodes"]
        assert isinstance(nodes, list)
        tls = record.get("tls")
        return cls(
            name=str(record["name"]), workdir=Path(str(record["workdir"])),
            cluster_id=str(record["cluster_id"]), version=str(record["version"]),
            tls=None if tls is None else TlsFiles(Path(str(tls))),
            jar_profile=None if record.get("jar_profile") is None else str(record["jar_profile"]),
            nodes=[
                KafkaNode(int(n["node_id"]), int(n["port"]), int(n["controller_port"]),
                          Path(n["workdir"]), pid=n["pid"], secured_ports=dict(n.get("secured_ports", {})))
                for n in nodes
            ],
        )

    # -- lifecycle -----------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        name: str,
        workdir: Path,
        *,
        nodes: int = 1,
        version: str = KAFKA_VERSION,
        broker_config: Mapping[str, str] | None = None,
        ports: list[tuple[int, int]] | None = None,
        security: BrokerSecurity | None = None,
        jar_profile: str | None = None,
    ) -> KafkaCluster:
        """Lay out config and format storage for a new cluster (not started yet).

        With ``security``, every node also gets the secured client listeners it names (see
        :mod:`mm2py.kafka_local.security`); ``bootstrap_for(protocol)`` gives their addresses.
        With ``jar_profile``, the nodes' class path also holds the jars of that Maven profile of
        ``pom.xml`` (``tiered``: KIP-405's ``LocalTieredStorage`` from Kafka's test jar, for
        brokers whose ``broker_config`` turns remote storage on)."""
        workdir = Path(workdir)
        if workdir.exists():
            shutil.rmtree(workdir)
        workdir.mkdir(parents=True)
        cluster = cls(name=name, workdir=workdir, version=version)
        cluster.jar_profile = jar_profile
        cluster.cluster_id = random_id()
        for i in range(1, nodes + 1):
            port, cport = ports[i - 1] if ports else (free_port(), free_port())
            cluster.nodes.append(KafkaNode(i, port, cport, workdir / f"node-{i}"))
            if security is not None:
                cluster.nodes[-1].secured_ports = {p: free_port() for p in security.listeners}
        if security is not None:
            cluster.tls = generate_tls_files(workdir / "tls", security.client_key_password)
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in cluster.nodes)
        libs = resolve_jars(version, profile=cluster.jar_profile)
        format_args = scram_format_args(security) if security is not None else []
        for node in cluster.nodes:
            node.workdir.mkdir()
            props = server_properties(node, voters, len(cluster.nodes))
            if security is not None:
                assert cluster.tls is not None
                add_listeners(props, node.secured_ports)
                props.update(broker_properties(security, cluster.tls))
            props.update(broker_config or {})
            (node.workdir / "server.properties").write_text(
                "".join(f"{k}={v}\n" for k, v in props.items())
            )
            (node.workdir / "log4j2.properties").write_text(
                LOG4J2.format(log=node.log_file, level="INFO")
            )
        format_storage(libs, cluster.cluster_id, cluster.nodes, format_args)
        return cluster

    def start(self, timeout: float = 60.0) -> KafkaCluster:
        libs = resolve_jars(self.version, profile=self.jar_profile)
        for node in self.nodes:
            if node.is_alive():
                continue
            cmd = [
                java_executable(),
                "-Xms256m", "-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-Djava.awt.headless=true", *class_archive_args("kafka-broker", libs), *self.jvm_args,
                f"-Dlog4j2.configurationFile={node.workdir / 'log4j2.properties'}",
                "-cp", f"{libs}/*",
                "kafka.Kafka", str(node.workdir / "server.properties"),
            ]
            out = open(node.workdir / "stdout.log", "ab")  # noqa: SIM115 - owned by the child
            node.process = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=node.workdir, start_new_session=True,
            )
            out.close()
            node.pid = node.process.pid
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until a Metadata request lists every node, or raise with the log's tail."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            for node in self.nodes:
                if not node.is_alive():
                    raise HarnessError(
                        f"Kafka node {node.node_id} of {self.name} exited during start-up; "
                        f"log {node.log_file}:\n{self.tail(node)}"
                    )
            try:
                md = admin.list_topics(timeout=2)
                if len(md.brokers) == len(self.nodes):
                    return
            except Exception as exc:  # KafkaException while the broker is still starting
                last_error = exc
            time.sleep(0.2)
        raise HarnessError(
            f"{self.name} not ready after {timeout:.0f}s ({last_error}); logs: "
            + ", ".join(str(p) for p in self.log_files)
        )

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM every node, then SIGKILL whatever is still running after ``timeout``."""
        alive = [n for n in self.nodes if n.is_alive()]
        for node in alive:
            _signal(node, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in alive:
            while node.is_alive() and time.monotonic() < deadline:
                _reap(node)
                time.sleep(0.1)
            if node.is_alive():
                _signal(node, signal.SIGKILL)
                for _ in range(50):
                    _reap(node)
                    if not node.is_alive():
                        break
                    time.sleep(0.1)
            _reap(node)

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node (leadership tests)."""
        node = self.nodes[node_id - 1]
        _signal(node, signal.SIGKILL)
        for _ in range(50):
            _reap(node)
            if not node.is_alive():
                return
            time.sleep(0.1)

    def pause_node(self, node_id: int) -> None:
        """SIGSTOP one node: it holds its connections and answers nothing until :meth:`resume_node`."""
        _signal(self.nodes[node_id - 1], signal.SIGSTOP)

    def resume_node(self, node_id: int) -> None:
        """SIGCONT a node paused by :meth:`pause_node`."""
        _signal(self.nodes[node_id - 1], signal.SIGCONT)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def tail(self, node: KafkaNode, lines: int = 40) -> str:
        text = ""
        for path in (node.log_file, node.workdir / "stdout.log"):
            if path.exists():
                text += path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal(node: KafkaNode, sig: signal.Signals) -> None:
    if node.pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(node.pid, sig)


def _reap(node: KafkaNode) -> None:
    if node.process is not None:
        node.process.poll()


def in_parallel(job: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``job`` on every item at once, each in a thread of its own (JVMs start in parallel); the
    results in the items' order; raises the first failure once all are done."""
    results: dict[int, R] = {}
    errors: list[BaseException] = []

    def run(i: int, item: T) -> None:
        try:
            results[i] = job(item)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, item)) for i, item in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [results[i] for i in range(len(items))]


def start_all(clusters: Sequence[KafkaCluster], timeout: float = 90.0) -> None:
    """Start several clusters at once (their JVMs boot in parallel); raise the first failure."""
    in_parallel(lambda c: c.start(timeout), clusters)


@contextlib.contextmanager
def running_cluster(
    name: str, workdir: Path, *, nodes: int = 1, security: BrokerSecurity | None = None,
    jar_profile: str | None = None,
) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster.create(name, workdir, nodes=nodes, security=security,
                                  jar_profile=jar_profile)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
