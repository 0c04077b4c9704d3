"""The Kafka Connect facade's worker information, connector plugins and config validation.

``GET /`` (``version``, ``commit``, ``kafka_cluster_id``), ``GET /connector-plugins`` (MirrorMaker
2's three connectors, the only plugins mm2py runs), ``GET /connector-plugins/{class}/config`` (their
settings, :mod:`mm2py.rest_api.connect.defs`) and ``PUT /connector-plugins/{class}/config/validate``
(each problem on its key, found by mm2py's own checks: :mod:`mm2py.rest_api.connect.validate`), in the
shapes Kafka Connect 4.1 gives them.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from fastapi import APIRouter

import mm2py
from mm2py.client.cluster import ClusterClient
from mm2py.config.models import FlowConfig
from mm2py.connectors.client_settings import raw_client_settings
from mm2py.errors import Mm2pyError
from mm2py.rest_api.connect.config import CLASSES, ConnectorConfigError, Kind, connector_kind
from mm2py.rest_api.connect.defs import definitions, groups
from mm2py.rest_api.connect.errors import ConnectError, ConnectRoute
from mm2py.rest_api.connect.facade import VERSION
from mm2py.rest_api.connect.validate import problems, value_infos
from mm2py.rest_api.shared import AnyWorker

__all__ = ["plugins_router", "source_commit"]


def source_commit() -> str:
    """The git commit of the source tree mm2py runs from, 16 hex digits as Kafka shows its own;
    ``unknown`` (Kafka's word for a build without one) for an installed package, which has no
    history: the package records no commit."""
    root = Path(mm2py.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return "unknown"
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = done.stdout.strip()
    if done.returncode != 0 or len(commit) != 40 or not all(c in "0123456789abcdef" for c in commit):
        return "unknown"
    return commit[:16]


def _kind(plugin: str) -> Kind:
    """The connector a plugin name means: full or simple class name, or the alias without
    ``Connector`` (``MirrorSource``), as Connect resolves plugin names; 404 for anything else."""
    for kind, full in CLASSES.items():
        simple = full.rsplit(".", 1)[1]
        if plugin in (full, simple, simple.removesuffix("Connector")):
            return kind
    raise ConnectError(404, f"unknown plugin {plugin!r}: mm2py runs "
                            f"{', '.join(c.rsplit('.', 1)[1] for c in sorted(CLASSES.values()))}")


def _base_name(plugin: str) -> str:
    """A plugin name without its package and ``Connector`` suffix, to compare names given two ways."""
    simple = plugin.rsplit(".", 1)[-1]
    return simple.removesuffix("Connector") if simple != "Connector" else simple


class ClusterIds:
    """Kafka cluster ids, asked of the brokers once per cluster."""

    def __init__(self, worker: AnyWorker) -> None:
        self.worker = worker
        self._known: dict[tuple[str, str], str] = {}

    def _primary(self) -> FlowConfig | None:
        """A flow writing to the worker's primary cluster, the one Connect would keep its own
        topics on: the target most of the worker's flows write to (the first configured on a
        tie); with no flow running, the first configured cluster that some pair writes to."""
        order = list(self.worker.config.clusters)
        targets = Counter(r.flow.target for r in self.worker.flows.values())
        if targets:
            alias = max(targets, key=lambda a: (targets[a], -order.index(a) if a in order else 0))
            return next(r.flow for r in self.worker.flows.values() if r.flow.target == alias)
        pairs = sorted(self.worker.config.flows.values(), key=lambda f: order.index(f.target))
        return pairs[0] if pairs else None

    async def primary(self) -> str | None:
        flow = self._primary()
        if flow is None:
            return None
        key = (flow.target, flow.target_cluster.bootstrap_servers)
        if key not in self._known:
            settings = raw_client_settings(flow, fetch_max_bytes=flow.fetch_max_bytes)
            client = ClusterClient(flow.target_cluster.bootstrap_servers, settings.target_client)
            try:
                await asyncio.wait_for(client.start(), max(1.0, flow.unreachable_timeout_ms / 1000))
            except (Mm2pyError, OSError, TimeoutError):
                return None  # unreachable now: asked again next time
            finally:
                await client.close()
            if client.cluster_id is None:
                return None
            self._known[key] = client.cluster_id
        return self._known[key]


def plugins_router(worker: AnyWorker) -> APIRouter:
    router = APIRouter(route_class=ConnectRoute, tags=["Kafka Connect facade"])
    commit = source_commit()
    cluster_ids = ClusterIds(worker)

    @router.get("/")
    async def server_info() -> dict[str, Any]:
        """This worker as Connect describes itself: mm2py's version, its commit, and the id of
        the Kafka cluster it writes to."""
        return {"version": VERSION, "commit": commit, "kafka_cluster_id": await cluster_ids.primary()}

    @router.get("/connector-plugins")
    async def list_plugins(connectorsOnly: str | None = None) -> list[dict[str, str]]:
        """MirrorMaker 2's connectors (mm2py has no converters, transforms or predicates, so the
        list is the same with ``connectorsOnly=false``)."""
        return [{"class": cls, "type": "source", "version": VERSION} for cls in sorted(CLASSES.values())]

    @router.get("/connector-plugins/{plugin}/config")
    async def plugin_config(plugin: str) -> list[dict[str, Any]]:
        return [key.info() for key in definitions(_kind(plugin))]

    @router.put("/connector-plugins/{plugin}/config/validate")
    async def validate(plugin: str, config: dict[str, Any]) -> dict[str, Any]:
        """Each key with its definition, value and problems (``error_count``: how many)."""
        given = config.get("connector.class")
        if given is None:
            raise ConnectError(400, "the config names no connector.class")
        if not isinstance(given, str) or not _base_name(given).endswith(_base_name(plugin)):
            raise ConnectError(400, f"the config's connector.class {given!r} is not {plugin!r}")
        try:
            kind = connector_kind(config)
        except ConnectorConfigError as exc:
            raise ConnectError(400, str(exc)) from None
        clusters = {a: c.bootstrap_servers for a, c in worker.config.clusters.items()}
        keys = definitions(kind)
        configs = value_infos(keys, config, problems(config, clusters))
        return {"name": given, "error_count": sum(len(c["value"]["errors"]) for c in configs),
                "groups": groups(keys), "configs": configs}

    return router
