"""Apache Kafka MirrorMaker 2 in dedicated mode as a test's subprocess (its jars from Maven Central):
the mm2.properties a user writes, its command line, and a process that is killed on every way out."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from mm2py.kafka_local import resolve_jars
from mm2py.kafka_local.class_archive import class_archive_args
from mm2py.kafka_local.jars import QUICK_JVM, java_executable
from mm2py.kafka_local.layout import LOG4J2

ROOT = Path(__file__).resolve().parents[1]


def mm2_properties(path: Path, src: str, dst: str, east: str, west: str, topic: str, **extra: object) -> Path:
    """An mm2.properties as an MM2 user writes it: MM2's own worker keys included."""
    path.write_text("\n".join(f"{k} = {v}" for k, v in {
        "clusters": f"{src}, {dst}",
        f"{src}.bootstrap.servers": east,
        f"{dst}.bootstrap.servers": west,
        f"{src}->{dst}.enabled": "true",
        f"{src}->{dst}.topics": topic,
        f"{dst}->{src}.enabled": "false",
        f"{dst}->{src}.emit.heartbeats.enabled": "false",
        "tasks.max": 2,
        "replication.factor": 1,
        "offset.storage.replication.factor": 1,
        "config.storage.replication.factor": 1,
        "status.storage.replication.factor": 1,
        "checkpoints.topic.replication.factor": 1,
        "heartbeats.topic.replication.factor": 1,
        "offset-syncs.topic.replication.factor": 1,
        "sync.topic.acls.enabled": "false",
        "emit.heartbeats.enabled": "false",
        "emit.checkpoints.enabled": "false",
        "scheduled.rebalance.max.delay.ms": 0,
        **extra,
    }.items()) + "\n")
    return path


@contextlib.contextmanager
def running(cmd: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=ROOT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def stop_process(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """SIGTERM (a clean stop: each commits its progress) or SIGKILL, and wait for the exit."""
    proc.send_signal(sig)
    proc.wait(90)


def mm2_command(cfg: Path, work: Path) -> list[str]:
    log4j = work / "mm2-log4j2.properties"
    log4j.write_text(LOG4J2.format(log=work / "mm2.log", level="INFO"))
    libs = resolve_jars(profile="mirrormaker")
    return [java_executable(), "-Xms128m", "-Xmx512m", QUICK_JVM, *class_archive_args("mirrormaker2", libs),
            f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*",
            "org.apache.kafka.connect.mirror.MirrorMaker", str(cfg)]
