"""Apache Kafka's own Kafka Connect distributed worker on loopback, running the real Mirror connectors.

The differential test of mm2py's ``/connectors`` facade sends the same REST calls to this worker and
to mm2py. The worker runs ``org.apache.kafka.connect.cli.ConnectDistributed`` from the pinned
release's jars (``mirrormaker`` profile: ``connect-runtime`` and ``connect-mirror``, so the Mirror
connectors are on the classpath and no ``plugin.path`` is needed), with its config, offset and status
topics (replication factor 1, names of its own) on the cluster it is given and its REST API on a free
loopback port. Its ``connect.log`` stays in its work dir (``tail`` shows the end of it).

``python -m tests.support.connect_worker BOOTSTRAP`` runs one until Ctrl-C and prints its URL.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mm2py.kafka_local.class_archive import class_archive_args
from mm2py.kafka_local.cluster import free_port
from mm2py.kafka_local.jars import KAFKA_VERSION, QUICK_JVM, HarnessError, java_executable, resolve_jars
from mm2py.kafka_local.layout import LOG4J2

__all__ = ["CONNECT_PROFILE", "ConnectWorker"]

#: the Maven profile whose jars hold Connect's runtime and the Mirror connectors
CONNECT_PROFILE = "mirrormaker"
_BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"


@dataclass
class ConnectWorker:
    """One Connect distributed worker (a cluster of one) storing its state on ``bootstrap``."""

    workdir: Path
    bootstrap: str
    port: int
    group_id: str
    version: str = KAFKA_VERSION
    #: worker settings over the defaults (``offset.flush.interval.ms``, say)
    overrides: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @classmethod
    def create(cls, workdir: Path, bootstrap: str, *,
               overrides: dict[str, str] | None = None) -> ConnectWorker:
        """A worker (not started) whose group and topics are named uniquely, on a free port."""
        workdir.mkdir(parents=True, exist_ok=True)
        group = f"connect-{uuid.uuid4().hex[:8]}"
        return cls(workdir, bootstrap, free_port(), group, overrides=dict(overrides or {}))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def offsets_topic(self) -> str:
        """The worker's ``offset.storage.topic``: where its source connectors' positions are kept."""
        return f"{self.group_id}-offsets"

    @property
    def log_file(self) -> Path:
        return self.workdir / "connect.log"

    def properties(self) -> dict[str, str]:
        """The worker's ``worker.properties``."""
        return {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group_id,
            "listeners": self.url,
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.port),
            "config.storage.topic": f"{self.group_id}-configs",
            "offset.storage.topic": self.offsets_topic,
            "status.storage.topic": f"{self.group_id}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "offset.storage.partitions": "1",
            "status.storage.partitions": "1",
            # the Mirror connectors copy bytes: MirrorMaker 2's own converters (JSON fails on them)
            "key.converter": _BYTES,
            "value.converter": _BYTES,
            "header.converter": _BYTES,
            "offset.flush.interval.ms": "1000",
            # a lone worker: no rebalance delay when a connector comes or goes
            "scheduled.rebalance.max.delay.ms": "0",
            **self.overrides,
        }

    def start(self, timeout: float = 180.0) -> ConnectWorker:
        """Start the JVM and wait until ``GET /`` answers and the worker has joined its group."""
        if self.is_alive():
            return self
        libs = resolve_jars(self.version, profile=CONNECT_PROFILE)
        config = self.workdir / "worker.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(LOG4J2.format(log=self.log_file, level="INFO"))
        cmd = [java_executable(), "-Xms128m", "-Xmx512m", "-XX:+UseG1GC", QUICK_JVM,
               "-Djava.awt.headless=true", *class_archive_args("connect-worker", libs),
               f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*",
               "org.apache.kafka.connect.cli.ConnectDistributed", str(config)]
        with open(self.workdir / "stdout.log", "ab") as out:
            self.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.workdir,
                                            start_new_session=True)
        self.wait_ready(timeout)
        return self

    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _get(self, path: str) -> tuple[int, Any]:
        with urllib.request.urlopen(self.url + path, timeout=5) as r:
            return int(r.status), json.loads(r.read() or b"null")

    def wait_ready(self, timeout: float) -> None:
        """Until ``GET /`` answers and ``GET /connectors`` does too (it answers once the worker
        has joined its group and read its config topic); the log's tail if it never does."""
        deadline = time.monotonic() + timeout
        last: Exception | str = "no answer yet"
        while time.monotonic() < deadline:
            if not self.is_alive():
                raise HarnessError(f"the Connect worker exited during start-up; log {self.log_file}:\n"
                                   + self.tail())
            try:
                if self._get("/")[0] == 200 and self._get("/connectors")[0] == 200:
                    return
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last = exc
            time.sleep(0.5)
        raise HarnessError(f"the Connect worker at {self.url} did not answer within {timeout:.0f}s "
                           f"({last}); log {self.log_file}:\n{self.tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (Connect stops its connectors and leaves its group), SIGKILL after ``timeout``."""
        if self.process is None:
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            if self.process.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(wait)

    def tail(self, lines: int = 60) -> str:
        text = ""
        for path in (self.log_file, self.workdir / "stdout.log"):
            if path.exists():
                text += path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> ConnectWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.connect_worker BOOTSTRAP", file=sys.stderr)
        return 2
    worker = ConnectWorker.create(Path.cwd() / "connect-worker", argv[0])
    with worker:
        print(f"Kafka Connect {worker.version} at {worker.url} (log {worker.log_file}); Ctrl-C stops it",
              flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while worker.is_alive():
                time.sleep(1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
