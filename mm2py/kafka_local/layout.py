"""A local Kafka node and its files: its ``server.properties``, its log4j2 configuration and its
formatted log directory."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .class_archive import class_archive_args
from .jars import HarnessError, cache_root, java_executable

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = FILE
logger.state.name = state.change.logger
logger.state.level = warn
"""


@dataclass
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    #: ports of secured client listeners, by protocol (SASL_SSL, SASL_PLAINTEXT, SSL)
    secured_ports: dict[str, int] = field(default_factory=dict)

    @property
    def log_file(self) -> Path:
        return self.workdir / "server.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def is_alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        if self.pid is None:
            return False
        try:
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes()
        except OSError:
            return False
        # a recycled pid belongs to some other program: only our JVM names our config file
        return str(self.workdir / "server.properties").encode() in cmdline


def random_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def server_properties(node: KafkaNode, voters: str, size: int) -> dict[str, str]:
    rf = str(min(3, size))
    return {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(node.workdir / "data"),
        "num.partitions": "1",
        "default.replication.factor": rf,
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "log.cleaner.backoff.ms": "1000",
        # retention is checked every 2 s, not every 5 minutes: a test sees it within its waits
        "log.retention.check.interval.ms": "2000",
        "num.network.threads": "2",
        "num.io.threads": "4",
        # the active controller appends a no-op record when the metadata log was idle this long
        # (default 500 ms): an idle broker took 2.2-2.5% of a core, 1.4% at 5 s
        "metadata.max.idle.interval.ms": "5000",
    }


def add_listeners(props: dict[str, str], ports: Mapping[str, int]) -> None:
    """Client listeners named after their protocol, next to PLAINTEXT and CONTROLLER."""
    for protocol, port in ports.items():
        props["listeners"] += f",{protocol}://127.0.0.1:{port}"
        props["advertised.listeners"] += f",{protocol}://127.0.0.1:{port}"
        props["listener.security.protocol.map"] += f",{protocol}:{protocol}"


def format_storage(libs: Path, cluster_id: str, nodes: Sequence[KafkaNode], format_args: list[str]) -> None:
    """Format every node's log directory: a copy of a formatted directory with the node's own
    ``meta.properties``.

    What Kafka's StorageTool writes is the same for every node and every cluster of one Kafka
    release and one set of format arguments (``bootstrap.checkpoint``: the metadata version, SCRAM
    credentials; only its timestamps and CRC differ) but for ``meta.properties``, which names the
    cluster, the node and its directory. So the tool runs once per machine for each release and set
    of arguments (a JVM start costs ~1.5 s of CPU on a small machine, paid by every cluster
    before), and the result is kept under ``<cache>/formatted``."""
    template = _formatted_template(libs, nodes[0], cluster_id, format_args)
    meta = (template / "meta.properties").read_text().splitlines()
    for node in nodes:
        shutil.copytree(template, node.workdir / "data")
        mine = {"cluster.id": cluster_id, "node.id": str(node.node_id), "directory.id": random_id()}
        lines = [f"{key}={mine[key]}" if (key := line.partition("=")[0]) in mine else line for line in meta]
        (node.workdir / "data" / "meta.properties").write_text("\n".join(lines) + "\n")


def _formatted_template(libs: Path, first: KafkaNode, cluster_id: str, format_args: list[str]) -> Path:
    """The kept formatted directory for this release and these arguments, made first if missing (by
    formatting ``first``'s configuration into a scratch directory beside it). Every node the
    harness lays out is a combined broker and controller with static voters
    (``controller.quorum.voters``): the rest of its configuration does not change what is written."""
    key = hashlib.sha256("\0".join([libs.name, *format_args]).encode()).hexdigest()[:16]
    template = cache_root() / "formatted" / key
    if (template / "meta.properties").exists():
        return template
    scratch = first.workdir / "format-scratch"
    props = (first.workdir / "server.properties").read_text().splitlines()
    scratch.mkdir()
    (scratch / "server.properties").write_text("".join(
        f"log.dirs={scratch / 'data'}\n" if line.startswith("log.dirs=") else f"{line}\n" for line in props))
    run_tool(
        libs,
        ["kafka.tools.StorageTool", "format", "--ignore-formatted", f"--cluster-id={cluster_id}",
         "-c", str(scratch / "server.properties"), *format_args],
        scratch,
    )
    template.parent.mkdir(parents=True, exist_ok=True)
    staged = template.with_name(f"{key}.{uuid.uuid4().hex[:8]}.tmp")
    shutil.copytree(scratch / "data", staged)
    try:
        staged.rename(template)  # whole or not at all; another process may have kept one first
    except OSError:
        shutil.rmtree(staged, ignore_errors=True)
        if not (template / "meta.properties").exists():
            raise
    shutil.rmtree(scratch, ignore_errors=True)
    return template


def run_tool(libs: Path, args: list[str], cwd: Path) -> str:
    proc = subprocess.run(
        [java_executable(), "-Xmx256m", *class_archive_args("kafka-tool", libs), "-cp", f"{libs}/*", *args],
        capture_output=True, text=True, cwd=cwd,
    )
    if proc.returncode != 0:
        raise HarnessError(f"{' '.join(args[:2])} failed: {proc.stdout}{proc.stderr}"[-3000:])
    return proc.stdout
