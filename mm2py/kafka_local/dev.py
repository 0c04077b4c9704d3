"""`mm2py dev up | down | status`: two local clusters (east, west) for the demo, kept across commands."""

from __future__ import annotations

import json
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from .cluster import KafkaCluster, free_port, start_all
from .jars import HarnessError, cache_root

DEV_CLUSTERS = {"east": (19092, 19093), "west": (29092, 29093)}


@dataclass
class DevStatus:
    name: str
    bootstrap: str
    running: bool
    reachable: bool

    def line(self) -> str:
        state = "up" if self.running and self.reachable else ("starting" if self.running else "down")
        return f"{self.name:6} {self.bootstrap:22} {state}"


def dev_dir() -> Path:
    """The dev clusters' files (what runs where, their data): ``$MM2PY_DEV_HOME`` or ``<cache>/dev``."""
    override = os.environ.get("MM2PY_DEV_HOME")
    return Path(override) if override else cache_root() / "dev"


def _clusters_file() -> Path:
    return dev_dir() / "state.json"


def load() -> list[KafkaCluster]:
    try:
        records = json.loads(_clusters_file().read_text())
    except (OSError, ValueError):
        return []
    return [KafkaCluster.from_record(r) for r in records]


def _save(clusters: list[KafkaCluster]) -> None:
    dev_dir().mkdir(parents=True, exist_ok=True)
    _clusters_file().write_text(json.dumps([c.to_record() for c in clusters], indent=2))


def _reachable(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def _port_or_free(port: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return free_port()
    return port


def status() -> list[DevStatus]:
    out = []
    for c in load():
        running = all(n.is_alive() for n in c.nodes)
        reachable = running and all(_reachable(n.address) for n in c.nodes)
        out.append(DevStatus(c.name, c.bootstrap, running, reachable))
    return out


def up(timeout: float = 90) -> list[KafkaCluster]:
    """Start east and west unless they already run; return the running clusters."""
    existing = load()
    if existing and all(n.is_alive() for c in existing for n in c.nodes):
        for c in existing:
            c.wait_ready(timeout)
        return existing
    down()  # half-dead leftovers: clean them up first
    clusters = []
    for name, (port, cport) in DEV_CLUSTERS.items():
        ports = [(_port_or_free(port), _port_or_free(cport))]
        clusters.append(KafkaCluster.create(name, dev_dir() / name, ports=ports))
    try:
        start_all(clusters, timeout)
    except BaseException as exc:
        _save(clusters)
        down()
        raise HarnessError(f"dev clusters failed to start: {exc}") from exc
    _save(clusters)
    return clusters


def down() -> list[str]:
    """Stop the dev clusters (SIGTERM, then SIGKILL) and delete their data. Returns their names."""
    stopped = []
    for c in load():
        c.stop()
        stopped.append(c.name)
        shutil.rmtree(c.workdir, ignore_errors=True)
    if _clusters_file().exists():
        _clusters_file().unlink()
    return stopped
