"""Helpers shared by the benchmark scripts: /proc sampling, topic creation, the WAN latency proxy."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic


def cpu_seconds(pid: int) -> float | None:
    """utime+stime of ``pid`` (all its threads), or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
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
