"""A Kafka Connect-shaped facade over the worker's flows: ``/connectors`` as Connect's REST API has it.

Tooling built for Kafka Connect (scripts, dashboards, ``kcctl``-style clients) can create, inspect,
pause, resume, stop, restart and delete MirrorMaker 2's connectors here, and read or change a
MirrorSourceConnector's offsets as KIP-875 defines them. How connector configs map onto flows is
:mod:`rest_api.connect_config`'s; every flow not created as a connector is listed under its own
name (``east->west``) as a MirrorSourceConnector. Errors have Connect's body,
``{"error_code": <status>, "message": "..."}``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from mm2py.protocol.types import TopicPartition
from mm2py.runtime.flow_offsets import Reset, read_offsets
from mm2py.runtime.worker_base import WorkerBase
from rest_api.connect_config import (
    CLASSES,
    Kind,
    as_text,
    connector_kind,
    flow_connector_config,
    owned_keys,
    plan_connector,
    released_settings,
)
from rest_api.connect_errors import ConnectError, ConnectRoute

__all__ = ["connect_router"]

AnyWorker = WorkerBase[Any]
_SECRET = re.compile(r"password|secret|jaas|token|credential|keystore\.key", re.IGNORECASE)



class NewConnector(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    config: dict[str, Any]


class OffsetEntry(BaseModel):
    partition: dict[str, Any]
    offset: dict[str, Any] | None


class OffsetsBody(BaseModel):
    offsets: list[OffsetEntry] = Field(min_length=1)


def _redacted(config: dict[str, str]) -> dict[str, str]:
    return {k: "[hidden]" if _SECRET.search(k) else v for k, v in config.items()}


def _state(state: str) -> str:
    """A flow or task state in Connect's words."""
    return state if state in ("RUNNING", "PAUSED", "STOPPED", "FAILED") else "UNASSIGNED"


class Facade:
    """Connectors as the worker's flows (registry of names in ``worker.connectors``)."""

    def __init__(self, worker: AnyWorker) -> None:
        self.worker = worker

    # -- names ------------------------------------------------------------------------------------
    def _pair(self, config: dict[str, str]) -> str:
        return f"{config['source.cluster.alias']}->{config['target.cluster.alias']}"

    def _registered(self, kind: Kind, flow: str) -> str | None:
        for name, config in self.worker.connectors.items():
            if connector_kind(config) == kind and self._pair(config) == flow:
                return name
        return None

    def names(self) -> list[str]:
        flows = [f for f in self.worker.flows if self._registered("source", f) is None]
        return sorted(self.worker.connectors) + sorted(flows)

    def lookup(self, name: str) -> tuple[Kind, str, dict[str, str]]:
        """(kind, flow name, config) of a connector; 404 for an unknown one."""
        config = self.worker.connectors.get(name)
        if config is not None:
            return connector_kind(config), self._pair(config), config
        runner = self.worker.flows.get(name)
        if runner is None:
            raise ConnectError(404, f"connector {name!r} not found")
        return "source", name, {"name": name, **flow_connector_config(runner.flow)}

    # -- shapes -----------------------------------------------------------------------------------
    def info(self, name: str) -> dict[str, Any]:
        config = self.lookup(name)[2]
        ids = [t["id"] for t in self.status(name, "")["tasks"]]
        return {"name": name, "config": _redacted(config), "type": "source",
                "tasks": [{"connector": name, "task": i} for i in ids]}

    def status(self, name: str, worker_id: str) -> dict[str, Any]:
        kind, flow, _ = self.lookup(name)
        runner = self.worker.flows.get(flow)
        state, trace, tasks = "UNASSIGNED", None, [{"id": 0, "state": "RUNNING"}]
        if kind == "heartbeat":
            state = "RUNNING" if flow in self.worker.heartbeats else "UNASSIGNED"
        elif runner is not None:
            st = runner.status()
            state, trace = _state(runner.state), st.get("trace")
            if kind == "source":
                tasks = [{"id": t["id"], "state": _state(t["state"]), "trace": t.get("trace")}
                         for t in st["tasks"]]
            elif st.get("checkpoints") is None and state == "RUNNING":
                state = "UNASSIGNED"
        if state in ("PAUSED", "FAILED") and kind != "source":
            tasks = [{"id": 0, "state": state}]
        elif state == "PAUSED":
            tasks = [{**t, "state": "PAUSED"} for t in tasks]
        elif state in ("STOPPED", "UNASSIGNED"):
            tasks = []  # Connect: a stopped connector has no tasks
        connector = {"state": state, "worker_id": worker_id, **({"trace": trace} if trace else {})}
        shaped = [{"id": t["id"], "state": t["state"], "worker_id": worker_id,
                   **({"trace": t["trace"]} if t.get("trace") else {})} for t in tasks]
        return {"name": name, "connector": connector, "tasks": shaped, "type": "source"}

    # -- changes ----------------------------------------------------------------------------------
    async def put(self, name: str, raw: dict[str, Any], *, create_only: bool) -> bool:
        """Create or replace connector ``name``; True if it was created."""
        if str(raw.get("name", name)) != name:
            raise ConnectError(400, f"the config's name {raw.get('name')!r} differs from {name!r}")
        if "/" in name:
            raise ConnectError(400, f"connector names cannot contain '/': {name!r}")
        exists = name in self.worker.connectors or name in self.worker.flows
        if exists and create_only:
            raise ConnectError(409, f"connector {name!r} already exists")
        kind = connector_kind(raw)
        pair = f"{raw.get('source.cluster.alias')}->{raw.get('target.cluster.alias')}"
        plan = plan_connector(raw, has_checkpoint=self._registered("checkpoint", pair) is not None,
                              has_heartbeat=self._registered("heartbeat", pair) is not None)
        if "->" in name and name != plan.flow:
            raise ConnectError(400, f"a connector named like a flow must be that flow's: {name!r}")
        if exists:
            old_kind, old_flow, _ = self.lookup(name)
            if (old_kind, old_flow) != (kind, plan.flow):
                raise ConnectError(400, f"connector {name!r} is a {CLASSES[old_kind]} of {old_flow}; "
                                        "delete it to create another connector under its name")
        other = self._registered(kind, plan.flow)
        if other is not None and other != name:
            raise ConnectError(409, f"{plan.flow} has a {CLASSES[kind]} already: {other!r}")
        await self._apply(name, kind, plan, exists)
        self.worker.connectors[name] = {**as_text(raw), "name": name}
        self.worker.store.save(self.worker.overlay)
        return not exists

    async def _apply(self, name: str, kind: Kind, plan: Any, exists: bool) -> None:
        w, flow = self.worker, plan.flow
        if kind == "source":
            keep: set[str] = set()  # the settings of the pair's checkpoint and heartbeat connectors
            for aux in ("checkpoint", "heartbeat"):
                if self._registered(aux, flow) is not None:
                    keep |= owned_keys(aux)
            if exists:
                await w.update_flow(flow, plan.settings, drop=lambda k: k not in keep)
            elif flow in w.flows:
                raise ConnectError(409, f"flow {flow} runs already (connector {flow!r}); "
                                        f"PUT /connectors/{flow}/config to change it")
            else:
                await w.add_flow(plan.source, plan.target, plan.settings, plan.clusters,
                                 drop=lambda k: k not in keep)
        elif kind == "checkpoint":
            if flow not in w.flows:
                raise ConnectError(400, f"a MirrorCheckpointConnector needs its pair's flow: create "
                                        f"the MirrorSourceConnector of {flow} first")
            await w.update_flow(flow, plan.settings, drop=owned_keys(kind).__contains__)
        else:
            await w.set_pair_settings(plan.source, plan.target, plan.settings, plan.clusters,
                                      drop=owned_keys(kind).__contains__)

    async def delete(self, name: str) -> None:
        kind, flow, _ = self.lookup(name)
        w = self.worker
        if kind == "source" and flow in w.flows:
            await w.remove_flow(flow)
        elif kind == "checkpoint" and flow in w.flows:
            await w.update_flow(flow, released_settings(kind), drop=owned_keys(kind).__contains__)
        elif kind == "heartbeat":
            source, target = flow.split("->", 1)
            await w.set_pair_settings(source, target, released_settings(kind),
                                      drop=owned_keys(kind).__contains__)
        if w.connectors.pop(name, None) is not None:
            w.store.save(w.overlay)

    def source_flow(self, name: str, what: str) -> str:
        """The flow of a MirrorSourceConnector; a 409 naming ``what`` for the other kinds."""
        kind, flow, _ = self.lookup(name)
        if kind != "source":
            raise ConnectError(409, f"{what} applies to a MirrorSourceConnector (the flow {flow}); "
                                    f"{name!r} is a {CLASSES[kind]}: delete it to turn it off")
        return flow


def _worker_id(request: Request) -> str:
    return f"{request.url.hostname}:{request.url.port}"


def _changes(source: str, body: OffsetsBody) -> dict[TopicPartition, Reset | None]:
    """KIP-875's partitions and offsets (``offset``: the last mirrored; null: forget) as resets."""
    out: dict[TopicPartition, Reset | None] = {}
    for entry in body.offsets:
        p = entry.partition
        if p.get("cluster") != source or not isinstance(p.get("topic"), str) or not isinstance(
                p.get("partition"), int):
            raise ConnectError(400, f"a partition is {{'cluster': {source!r}, 'topic': str, "
                                    f"'partition': int}}, got {p}")
        tp = TopicPartition(p["topic"], p["partition"])
        last = None if entry.offset is None else entry.offset.get("offset")
        if entry.offset is not None and not isinstance(last, int):
            raise ConnectError(400, f"an offset is {{'offset': int}} or null, got {entry.offset}")
        out[tp] = None if last is None else last + 1
    return out


def connect_router(worker: AnyWorker) -> APIRouter:
    """The ``/connectors`` routes (Kafka Connect's REST API, KIP-875 offsets included)."""
    router = APIRouter(route_class=ConnectRoute, tags=["Kafka Connect facade"])
    facade = Facade(worker)
    _config_routes(router, facade)
    _lifecycle_routes(router, facade)
    _offset_routes(router, facade)
    return router


def _config_routes(router: APIRouter, facade: Facade) -> None:
    @router.get("/connectors")
    async def list_connectors(request: Request, expand: Annotated[list[str] | None, Query()] = None) -> Any:
        names = facade.names()
        if not expand:
            return names
        out: dict[str, dict[str, Any]] = {}
        for name in names:
            out[name] = {}
            if "status" in expand:
                out[name]["status"] = facade.status(name, _worker_id(request))
            if "info" in expand:
                out[name]["info"] = facade.info(name)
        return out

    @router.post("/connectors", status_code=201)
    async def create_connector(body: NewConnector) -> dict[str, Any]:
        await facade.put(body.name, body.config, create_only=True)
        return facade.info(body.name)

    @router.get("/connectors/{name}")
    async def get_connector(name: str) -> dict[str, Any]:
        return facade.info(name)

    @router.get("/connectors/{name}/config")
    async def get_config(name: str) -> dict[str, str]:
        return _redacted(facade.lookup(name)[2])

    @router.put("/connectors/{name}/config")
    async def put_config(name: str, config: dict[str, Any], response: Response) -> dict[str, Any]:
        created = await facade.put(name, config, create_only=False)
        response.status_code = 201 if created else 200
        return facade.info(name)

    @router.get("/connectors/{name}/status")
    async def get_status(name: str, request: Request) -> dict[str, Any]:
        return facade.status(name, _worker_id(request))

    @router.get("/connectors/{name}/tasks")
    async def get_tasks(name: str) -> list[dict[str, Any]]:
        info = facade.info(name)
        return [{"id": t, "config": info["config"]} for t in info["tasks"]]

    @router.delete("/connectors/{name}", status_code=204)
    async def delete(name: str) -> Response:
        await facade.delete(name)
        return Response(status_code=204)


def _lifecycle_routes(router: APIRouter, facade: Facade) -> None:
    worker = facade.worker

    @router.put("/connectors/{name}/pause", status_code=202)
    async def pause(name: str) -> Response:
        await worker.halt_flow(facade.source_flow(name, "pause"), "PAUSED")
        return Response(status_code=202)

    @router.put("/connectors/{name}/stop", status_code=202)
    async def stop(name: str) -> Response:
        await worker.halt_flow(facade.source_flow(name, "stop"), "STOPPED")
        return Response(status_code=202)

    @router.put("/connectors/{name}/resume", status_code=202)
    async def resume(name: str) -> Response:
        await worker.resume_flow(facade.source_flow(name, "resume"))
        return Response(status_code=202)

    @router.post("/connectors/{name}/restart")
    async def restart(name: str, request: Request, includeTasks: bool = False,
                      onlyFailed: bool = False) -> Response:
        """The flow restarts (connector and tasks are one here); ``onlyFailed``: only if something failed."""
        flow = facade.source_flow(name, "restart")
        before = facade.status(name, _worker_id(request))
        failed = before["connector"]["state"] == "FAILED" or any(
            t["state"] == "FAILED" for t in before["tasks"])
        if failed or not onlyFailed:
            await worker.restart_flow(flow)
        if not (includeTasks or onlyFailed):
            return Response(status_code=204)
        return JSONResponse(facade.status(name, _worker_id(request)), status_code=202)

    @router.post("/connectors/{name}/tasks/{task}/restart", status_code=204)
    async def restart_task(name: str, task: int) -> Response:
        """A task restarts with its flow (tasks share the flow's controller)."""
        await worker.restart_flow(facade.source_flow(name, "a task restart"))
        return Response(status_code=204)


def _offset_routes(router: APIRouter, facade: Facade) -> None:
    worker = facade.worker

    @router.get("/connectors/{name}/offsets")
    async def get_offsets(name: str) -> dict[str, Any]:
        kind, flow, _ = facade.lookup(name)
        if kind != "source":
            return {"offsets": []}  # mm2py keeps no positions for checkpoints or heartbeats
        runner = worker.flows.get(flow)
        config = runner.flow if runner is not None else worker.config.flow(*flow.split("->", 1))
        rows = await read_offsets(config)
        return {"offsets": [
            {"partition": {"cluster": config.source, "partition": r.partition, "topic": r.topic},
             "offset": {"offset": r.position - 1}} for r in rows if r.position is not None]}

    @router.patch("/connectors/{name}/offsets")
    async def alter_offsets(name: str, body: OffsetsBody) -> dict[str, str]:
        """KIP-875: only while the connector is STOPPED; it resumes from the new offsets."""
        source, target = facade.source_flow(name, "altering offsets").split("->", 1)
        rows = await worker.reset_offsets(source, target, _changes(source, body))
        return {"message": f"offsets of {len(rows)} partitions of connector {name!r} altered; "
                           "they apply when it resumes"}

    @router.delete("/connectors/{name}/offsets")
    async def reset_offsets(name: str) -> dict[str, str]:
        """KIP-875: only while STOPPED; every partition starts again as never mirrored."""
        source, target = facade.source_flow(name, "resetting offsets").split("->", 1)
        rows = await worker.reset_offsets(source, target, None)
        return {"message": f"offsets of {len(rows)} partitions of connector {name!r} reset; "
                           "they apply when it resumes"}
