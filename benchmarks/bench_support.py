"""Helpers shared by the benchmark scripts: /proc sampling, topic creation, the peers' commands and
processes (mm2py in-process or on Spark, Apache Kafka MirrorMaker 2, the record copy), the WAN
latency proxy."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the scripts import mm2py from this checkout, installed or not
    sys.path.insert(1, str(ROOT))


def compile_package() -> None:
    """Byte-compile mm2py (as ``scripts/install.sh`` and any non-editable install do), so the mm2py
    peer does not compile its modules from source at every start when PYTHONDONTWRITEBYTECODE is set;
    the other peers run compiled code too (the JVM's jars, librdkafka)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", "mm2py"],
                   cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


def cpu_seconds(pid: int) -> float | None:
    """utime+stime of ``pid`` (all its threads), or None once it is gone."""
    try:
        return _stat_cpu(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return None


def _stat_cpu(stat: str) -> float:
    """utime+stime in seconds from the text of a ``/proc/<pid>[/task/<tid>]/stat`` file."""
    fields = stat.rsplit(")", 1)[1].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def total_cpu(pids: list[int]) -> float:
    return sum(cpu_seconds(p) or 0.0 for p in pids)


def jit_cpu(pids: list[int]) -> float:
    """utime+stime of the JIT compiler threads (``C1/C2 CompilerThread<n>``) of JVMs ``pids``: the
    part of a broker's CPU that is the JVM compiling its code, not serving requests."""
    total = 0.0
    for pid in pids:
        for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                text = stat.read_text()
                if "CompilerThre" in text[text.index("(") + 1:text.rindex(")")]:
                    total += _stat_cpu(text)
    return total


def run_order(peers: list[str], rounds: int) -> list[tuple[str, str]]:
    """(peer, label) per run: every other round reversed, so no peer always runs first on brokers that
    have just started; labels carry the round when there are several."""
    runs = []
    for r in range(1, rounds + 1):
        for peer in (peers if r % 2 else peers[::-1]):
            runs.append((peer, f"{peer} #{r}" if rounds > 1 else peer))
    return runs


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (the Spark runtime's JVM, pyspark daemon and workers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def tree_cpu(pid: int) -> float | None:
    """utime+stime of ``pid`` and its live descendants."""
    own = cpu_seconds(pid)
    return None if own is None else own + total_cpu(process_tree(pid)[1:])


def process_role(pid: int, root: int | None = None) -> str:
    """What a process of a mirror's tree is: the mirror's own process (the Spark driver's Python
    for a Spark peer), a JVM (the Spark driver's (with ``local[N]``'s executor in it),
    or an executor's: ``CoarseGrainedExecutorBackend``), or a Python process Spark started (its
    daemon and the workers forked from it: leases, mirror hosts)."""
    if pid == root:
        return "driver Python"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "java" in cmdline.split(" ", 1)[0]:
        return "executor JVMs" if "CoarseGrainedExecutorBackend" in cmdline else "driver JVM"
    if "python" in cmdline.split(" ", 1)[0]:
        return "executor Python"
    return "other"


def tree_cpu_parts(pid: int) -> dict[str, float]:
    """utime+stime of ``pid``'s tree by role (:func:`process_role`): where a Spark peer's CPU goes."""
    parts: dict[str, float] = {}
    for p in process_tree(pid):
        cpu = cpu_seconds(p)
        if cpu is not None:
            role = process_role(p, pid)
            parts[role] = parts.get(role, 0.0) + cpu
    return parts


def tree_rss_mib(pid: int) -> float | None:
    """Sum of the peak RSS of ``pid`` and its live descendants (an upper bound of the joint peak)."""
    own = peak_rss_mib(pid)
    return None if own is None else own + sum(peak_rss_mib(p) or 0.0 for p in process_tree(pid)[1:])


# ----------------------------------------------------------------------------------- topic data
def make_values(size: int, count: int = 8192) -> list[bytes]:
    """Half random hex, half repetitive: lz4/zstd shrink these roughly 2-3x, like typical JSON."""
    half = size // 2
    return [os.urandom(half // 2 + 1).hex()[:half].encode() + b"x" * (size - half) for _ in range(count)]


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=5).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} not ready on {bootstrap}")


def warm_group_coordinator(bootstrap: str) -> None:
    """Make a fresh cluster create its ``__consumer_offsets`` topic (50 partitions) now, with a group
    commit: a real cluster has it already, and in a benchmark the first peer that touches a consumer
    group (offset translation, checkpoints) would otherwise pay for it in broker CPU and start-up."""
    topic = "bench-warmup"
    create_topic(bootstrap, topic, 1)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-warmup-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()


class OffsetProbe:
    """End offsets of a topic, cheaply (one ListOffsets per partition per call)."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4()}"})

    def ends(self, topic: str) -> dict[int, int] | None:
        try:
            md = self.consumer.list_topics(topic, timeout=5).topics.get(topic)
            if md is None or md.error is not None or not md.partitions:
                return None
            return {p: self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                    for p in md.partitions}
        except KafkaException:  # a topic just created may have no leader yet
            return None

    def close(self) -> None:
        self.consumer.close()


# ---------------------------------------------------------------------------------------- peers
JVM_OPTS = ["-Xms256m", "-Xmx2g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",  # connect-mirror-maker.sh
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
            "-Djava.awt.headless=true"]
LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""


@dataclass
class Setup:
    """What a peer's command is built from. Peer *n* gets the aliases ``src<n>``/``dst<n>``, so with
    the default replication policy it writes ``src<n>.<topic>`` and no run sees another's topics."""

    source: str  # what the peers bootstrap from (through the latency proxy with --rtt-ms)
    target: str
    topic: str
    workdir: Path
    tasks: int = 1
    codec: str = "lz4"  # MM2's and the record copy's producer codec (mm2py keeps the source's)
    batch_kib: int = 256  # batch.size of the record copy and mm2-tuned
    mm2py_props: list[str] = field(default_factory=list)  # KEY=VALUE, {src}/{dst} expand
    mm2_props: list[str] = field(default_factory=list)
    spark_master: str = ""  # mm2py-spark: default embedded local[N]
    target_direct: str = ""  # the target as the script's own probes reach it (no added latency)
    proxy_pid: int | None = None


def properties(items: dict[str, object]) -> str:
    return "".join(f"{k} = {v}\n" for k, v in items.items())


def _extra(items: list[str], src: str, dst: str) -> dict[str, str]:
    out = {}
    for kv in items:
        key, sep, value = kv.format(src=src, dst=dst).partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected KEY=VALUE, got {kv!r}")
        out[key.strip()] = value.strip()
    return out


def mm2py_command(s: Setup, src: str, dst: str, runtime: str = "inprocess", verify: bool = True,
                  spark_mode: str = "leases") -> list[str]:
    """``mm2py run`` in-process, or with ``--runtime spark`` (embedded local[N] unless
    ``s.spark_master``); ``verify=False``: with ``mm2py.verify.enabled=false`` (what the per-batch
    comparison costs)."""
    cfg = s.workdir / ("mm2py-spark.properties" if runtime == "spark" else "mm2py.properties")
    cfg.write_text(properties({
        "clusters": f"{src}, {dst}", f"{src}.bootstrap.servers": s.source,
        f"{dst}.bootstrap.servers": s.target, f"{src}->{dst}.enabled": "true",
        f"{src}->{dst}.topics": s.topic, "tasks.max": s.tasks,
        "replication.factor": 1, "offset-syncs.topic.replication.factor": 1,
        "checkpoints.topic.replication.factor": 1, "heartbeats.topic.replication.factor": 1,
        "sync.topic.acls.enabled": "false",
        **({} if verify else {"mm2py.verify.enabled": "false"}),
        **_extra(s.mm2py_props, src, dst),
    }))
    # a Spark driver says every 30 s how many leases it started (scale_bench reads it from its log)
    cmd = [sys.executable, "-m", "mm2py.cli", "run", "-c", str(cfg), "--log-level",
           "info" if runtime == "spark" else "warning"]
    if runtime == "spark":
        cmd += ["--runtime", "spark", "--spark-mode", spark_mode,
                *(["--spark-master", s.spark_master] if s.spark_master else [])]
    return cmd


def mm2_command(s: Setup, src: str, dst: str, tuned: bool = False) -> list[str]:
    """MirrorMaker 2 in dedicated mode: its defaults except the target codec (and, ``tuned``, the
    record copy's producer batching)."""
    from mm2py.kafka_local import resolve_jars
    from mm2py.kafka_local.jars import java_executable

    tag = "mm2-tuned" if tuned else "mm2"
    cfg, log4j = s.workdir / f"{tag}.properties", s.workdir / f"{tag}-log4j2.properties"
    log4j.write_text(LOG4J2.format(log=s.workdir / f"{tag}.log"))
    cfg.write_text(properties({
        "clusters": f"{src}, {dst}", f"{src}.bootstrap.servers": s.source,
        f"{dst}.bootstrap.servers": s.target, f"{src}->{dst}.enabled": "true",
        f"{dst}->{src}.enabled": "false", f"{src}->{dst}.topics": s.topic, "tasks.max": s.tasks,
        # the copy is recompressed by MM2's producer: give it the source codec, as the others have
        f"{dst}.producer.compression.type": s.codec,
        "replication.factor": 1, "offset.storage.replication.factor": 1,
        "config.storage.replication.factor": 1, "status.storage.replication.factor": 1,
        "checkpoints.topic.replication.factor": 1, "heartbeats.topic.replication.factor": 1,
        "offset-syncs.topic.replication.factor": 1, "sync.topic.acls.enabled": "false",
        "emit.checkpoints.enabled": "true", "emit.heartbeats.enabled": "true",
        **({f"{dst}.producer.batch.size": s.batch_kib * 1024, f"{dst}.producer.linger.ms": 20}
           if tuned else {}),
        **_extra(s.mm2_props, src, dst),
    }))
    libs = resolve_jars(profile="mirrormaker")
    return [java_executable(), *JVM_OPTS, f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*",
            "org.apache.kafka.connect.mirror.MirrorMaker", str(cfg)]


def record_copy_command(s: Setup, src: str, _dst: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve().with_name("record_copy.py")), "--source", s.source,
            "--target", s.target, "--topic", s.topic, "--dest", f"{src}.{s.topic}",
            "--codec", s.codec, "--batch-kib", str(s.batch_kib)]


#: every peer's command, by name: ``COMMANDS[peer](setup, src_alias, dst_alias)``
COMMANDS: dict[str, Callable[[Setup, str, str], list[str]]] = {
    "mm2py": mm2py_command,
    "mm2py-spark": lambda s, src, dst: mm2py_command(s, src, dst, runtime="spark"),
    # leases as Spark jobs of their own (the placement before mirror hosts), for comparison
    "mm2py-spark-jobs": lambda s, src, dst: mm2py_command(s, src, dst, runtime="spark",
                                                         spark_mode="lease-jobs"),
    "mm2py-unverified": lambda s, src, dst: mm2py_command(s, src, dst, verify=False),
    "mm2": mm2_command,
    "mm2-tuned": lambda s, src, dst: mm2_command(s, src, dst, tuned=True),
    "record-copy": record_copy_command,
}


@contextlib.contextmanager
def peer_process(cmd: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cmd`` in its own process group. On the way out: SIGTERM to the process itself (so it
    stops its children in order, e.g. the Spark runtime its JVM), SIGKILL to the group after 20 s,
    and SIGKILL to whatever is left in the group."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=ROOT, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                    filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
    try:
        yield proc
    finally:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not orphan it
        for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                (os.kill if sig == signal.SIGTERM else os.killpg)(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(wait)
        with contextlib.suppress(ProcessLookupError):  # whatever it left behind in its group
            os.killpg(proc.pid, signal.SIGKILL)
        signal.signal(signal.SIGINT, previous)


# ------------------------------------------------------------------------- WAN latency (proxy)
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class WanPorts:
    """Ports of a single-node cluster whose clients reach it through a latency proxy.

    ``client`` is the PLAINTEXT listener, advertised as ``proxy``: whoever bootstraps through the
    proxy gets the proxy's address back in Metadata and so sends every request across the added
    latency. ``direct`` is a second listener advertised as itself, for the harness only (seeding,
    end-offset probes, scans), so its own measurements do not wait on the proxy. The controller and
    inter-broker listeners stay direct."""

    client: int = field(default_factory=free_port)
    controller: int = field(default_factory=free_port)
    direct: int = field(default_factory=free_port)
    proxy: int = field(default_factory=free_port)

    def broker_config(self) -> dict[str, str]:
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.client},CONTROLLER://127.0.0.1:{self.controller},"
                         f"DIRECT://127.0.0.1:{self.direct}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.proxy},DIRECT://127.0.0.1:{self.direct}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,DIRECT:PLAINTEXT",
            "inter.broker.listener.name": "DIRECT",
        }


def start_latency_proxy(listen: int, to: int, rtt_ms: float, log: Path) -> subprocess.Popen[bytes]:
    """``latency_proxy.py`` as its own process (its CPU is then not the peer's nor the script's)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("latency_proxy.py")), "--listen",
             f"127.0.0.1:{listen}", "--to", f"127.0.0.1:{to}", "--delay-ms", str(rtt_ms)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", listen), timeout=1):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    stop_process(proc)
    raise RuntimeError(f"latency proxy on port {listen} did not start; see {log}")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
