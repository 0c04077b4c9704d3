"""The Kafka Connect facade's state changes, offsets and active topics of connectors.

``PUT /connectors/{name}/pause``, ``/resume`` (202) and ``/stop`` (204, as Connect 4.1 answers),
``POST .../restart`` and ``.../tasks/{n}/restart``; KIP-875's ``GET``/``PATCH``/``DELETE
.../offsets`` of a MirrorSourceConnector; KIP-558's ``GET .../topics`` and ``PUT .../topics/reset``.
Pause, stop, resume and restart apply to a MirrorSourceConnector's flow, and to a checkpoint or
heartbeat connector's job (:mod:`mm2py.rest_api.connect.halted`); offset changes to a MirrorSourceConnector
(409 on the others).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from mm2py.engine.task_contract import TaskState
from mm2py.operations.flow_offsets import Reset, read_offsets
from mm2py.protocol.types import TopicPartition
from mm2py.rest_api.connect.errors import ConnectError, ConnectRoute
from mm2py.rest_api.connect.facade import Facade, worker_id

__all__ = ["control_router"]


class OffsetEntry(BaseModel):
    partition: dict[str, Any]
    offset: dict[str, Any] | None


class OffsetsBody(BaseModel):
    offsets: list[OffsetEntry] = Field(min_length=1)


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


def control_router(facade: Facade) -> APIRouter:
    """Pause, resume, stop, restart; offsets; active topics."""
    router = APIRouter(route_class=ConnectRoute, tags=["Kafka Connect facade"])
    _lifecycle_routes(router, facade)
    _offset_routes(router, facade)
    _topic_routes(router, facade)
    return router


def _lifecycle_routes(router: APIRouter, facade: Facade) -> None:
    @router.put("/connectors/{name}/pause", status_code=202)
    async def pause(name: str) -> Response:
        await facade.halt(name, TaskState.PAUSED)
        return Response(status_code=202)

    @router.put("/connectors/{name}/stop", status_code=204)
    async def stop(name: str) -> Response:
        await facade.halt(name, TaskState.STOPPED)
        return Response(status_code=204)

    @router.put("/connectors/{name}/resume", status_code=202)
    async def resume(name: str) -> Response:
        await facade.resume(name)
        return Response(status_code=202)

    @router.post("/connectors/{name}/restart")
    async def restart(name: str, request: Request, includeTasks: bool = False,
                      onlyFailed: bool = False) -> Response:
        """The connector restarts with its tasks (a flow's are one); ``onlyFailed``: only if
        something failed."""
        before = facade.status(name, worker_id(request))
        failed = before["connector"]["state"] == "FAILED" or any(
            t["state"] == "FAILED" for t in before["tasks"])
        if failed or not onlyFailed:
            await facade.restart(name)
        if not (includeTasks or onlyFailed):
            return Response(status_code=204)
        return JSONResponse(facade.status(name, worker_id(request)), status_code=202)

    @router.post("/connectors/{name}/tasks/{task}/restart", status_code=204)
    async def restart_task(name: str, task: int, request: Request) -> Response:
        """A task restarts with its connector (a flow's tasks share its controller). As Connect
        answers: 409 while the connector is stopped (no worker runs its tasks), 404 for a task it
        does not have."""
        status = facade.status(name, worker_id(request))
        if status["connector"]["state"] == TaskState.STOPPED:
            raise ConnectError(409, f"connector {name!r} is stopped: it has no task to restart")
        if not any(t["id"] == task for t in status["tasks"]):
            raise ConnectError(404, f"unknown task {task} of connector {name!r}")
        await facade.restart(name)
        return Response(status_code=204)


def _offset_routes(router: APIRouter, facade: Facade) -> None:
    worker = facade.worker

    @router.get("/connectors/{name}/offsets")
    async def get_offsets(name: str) -> dict[str, Any]:
        kind, flow, _ = facade.lookup(name)
        if kind != "source":
            return {"offsets": []}  # mm2py keeps no positions for checkpoints or heartbeats
        config = worker.flow_config(flow)
        rows = await read_offsets(config)
        return {"offsets": [
            {"partition": {"cluster": config.source, "partition": r.partition, "topic": r.topic},
             "offset": {"offset": r.position - 1}} for r in rows if r.position is not None]}

    @router.patch("/connectors/{name}/offsets")
    async def alter_offsets(name: str, body: OffsetsBody) -> dict[str, str]:
        """KIP-875: only while the connector is STOPPED; it resumes from the new offsets."""
        flow = facade.source_flow(name, "altering offsets")
        rows = await worker.reset_offsets(flow, _changes(worker.flow_config(flow).source, body))
        return {"message": f"offsets of {len(rows)} partitions of connector {name!r} altered; "
                           "they apply when it resumes"}

    @router.delete("/connectors/{name}/offsets")
    async def reset_offsets(name: str) -> dict[str, str]:
        """KIP-875: only while STOPPED; every partition starts again as never mirrored."""
        rows = await worker.reset_offsets(facade.source_flow(name, "resetting offsets"), None)
        return {"message": f"offsets of {len(rows)} partitions of connector {name!r} reset; "
                           "they apply when it resumes"}


def _topic_routes(router: APIRouter, facade: Facade) -> None:
    @router.get("/connectors/{name}/topics")
    async def active_topics(name: str) -> dict[str, Any]:
        """KIP-558: the topics the connector wrote to since it was created or last reset."""
        return {name: {"topics": facade.topics(name)}}

    @router.put("/connectors/{name}/topics/reset", status_code=202)
    async def reset_topics(name: str) -> Response:
        """KIP-558: forget them; each is recorded again when next written to."""
        await facade.reset_topics(name)
        return Response(status_code=202)
