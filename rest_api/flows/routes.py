"""The ``/flows`` API: create, inspect, change, restart and remove a worker's mirror flows, and move a
consumer group to a flow's target (failover).

A flow is addressed by its name, ``/flows/{name}`` (a pair may have several flows, each with its own
name; a pair's unnamed flow is ``east->west``), or by its pair, ``/flows/{source}/{target}``, where
the pair has one (:mod:`mm2py.rest_api.flows.paths`). Bodies use MM2's setting names; every change is
validated like the configuration file (the error names the key) before anything is touched, and a
flow whose clusters cannot be reached is not left half-created. Errors are ``{"error", "key"}``
bodies (:func:`flow_errors`); pause, stop, resume and offsets are :mod:`mm2py.rest_api.flows.control`'s.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from mm2py.config.errors import ConfigError
from mm2py.errors import ClusterUnreachableError, Mm2pyError, SecurityError
from mm2py.operations.failover import (
    FailoverError,
    GroupActiveError,
    UnknownGroupError,
    apply,
    check_topic_regex,
    translate,
)
from mm2py.operations.flow_offsets import OffsetResetError
from mm2py.rest_api.flows.bodies import (
    ClusterInfo,
    ErrorBody,
    FlowCreate,
    FlowList,
    FlowStatus,
    FlowUpdate,
    GroupOffsets,
    OffsetsRequest,
    TranslatedOffset,
    flow_status,
)
from mm2py.rest_api.shared import AnyWorker, redacted
from mm2py.runtime.steering import (
    ClusterConflictError,
    FlowConflictError,
    FlowExistsError,
    FlowNotFoundError,
    FlowStateError,
)

__all__ = ["ERROR_RESPONSES", "flow_errors", "flow_routes", "group_offset_routes"]

#: errors of the layers below, as HTTP statuses (the message is the body's ``error``)
_STATUS: dict[type[Exception], int] = {
    ConfigError: 400,
    FlowNotFoundError: 404,
    FlowExistsError: 409,
    FlowConflictError: 409,  # two flows of a pair would mirror one topic; a pair with several flows
    ClusterConflictError: 409,
    FlowStateError: 409,  # e.g. an offsets reset while the flow runs
    OffsetResetError: 400,
    SecurityError: 401,  # the cluster refused our TLS/SASL: a setting to fix, not an outage
    ClusterUnreachableError: 503,
    UnknownGroupError: 404,
    GroupActiveError: 409,
    FailoverError: 400,
    Mm2pyError: 500,  # any other error of ours: its message, not a stack trace
}

#: the error bodies every route may answer (the OpenAPI document's default responses)
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (400, 404, 409, 401, 422, 503)
}


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse(ErrorBody(error=message, **extra).model_dump(exclude_none=True), status_code=status)


def _validation_message(err: dict[str, Any]) -> str:
    loc = [str(p) for p in err.get("loc", ()) if p != "body"]
    where = ".".join(loc) if loc else "body"
    if err.get("type") == "json_invalid":
        return f"request body is not valid JSON: {err.get('ctx', {}).get('error', err.get('msg'))}"
    if err.get("type") == "extra_forbidden":
        return f"unknown field {where!r}"
    return f"invalid {where!r}: {err.get('msg')}"


def flow_errors(app: FastAPI) -> None:
    """Bad requests and the errors of the layers below as ``{"error", "key"}`` bodies."""

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        message = "; ".join(_validation_message(e) for e in errors[:3])
        details = [{"loc": list(e.get("loc", ())), "msg": e.get("msg")} for e in errors]
        return _error(422, message, details=details)

    async def known_error(_: Request, exc: Exception) -> JSONResponse:
        status = next(code for kind, code in _STATUS.items() if isinstance(exc, kind))  # subclasses first
        return _error(status, str(exc), key=getattr(exc, "key", None))

    for kind in _STATUS:
        app.add_exception_handler(kind, known_error)


def flow_routes(app: FastAPI, worker: AnyWorker) -> None:
    """Health, clusters, and the flows: list, create, read, configuration, change, restart, remove."""

    @app.get("/health")
    async def health() -> dict[str, Any]:
        states = {name: r.state for name, r in worker.flows.items()}
        return {"status": "ok", "flows": states}

    @app.get("/clusters")
    async def clusters() -> list[ClusterInfo]:
        items = worker.config.clusters.items()
        return [ClusterInfo(alias=a, bootstrap_servers=c.bootstrap_servers) for a, c in items]

    @app.get("/flows")
    async def list_flows() -> FlowList:
        return FlowList(flows=[flow_status(r) for r in worker.flows.values()])

    @app.post("/flows", status_code=201)
    async def create_flow(body: FlowCreate) -> FlowStatus:
        clusters = {alias: spec.keys() for alias, spec in body.clusters.items()}
        runner = await worker.add_flow(body.source, body.target, body.patch(), clusters, name=body.name)
        return flow_status(runner)

    @app.get("/flows/{name}")
    async def get_flow(name: str) -> FlowStatus:
        """A flow by name (``/flows/{source}/{target}``: the pair's, where it has one)."""
        return flow_status(worker.flow(name))

    @app.get("/flows/{name}/config")
    async def get_config(name: str) -> dict[str, Any]:
        flow = worker.flow(name).flow
        data = flow.model_dump(by_alias=True, exclude={"source_cluster", "target_cluster", "label"})
        return redacted({"name": flow.name, **data})

    @app.patch("/flows/{name}")
    async def update_flow(name: str, body: FlowUpdate) -> FlowStatus:
        patch = body.patch()
        if not patch.values:
            return flow_status(worker.flow(name))
        return flow_status(await worker.update_flow(name, patch))

    @app.post("/flows/{name}/restart")
    async def restart_flow(name: str) -> FlowStatus:
        return flow_status(await worker.restart_flow(name))

    @app.delete("/flows/{name}", status_code=204)
    async def delete_flow(name: str) -> Response:
        await worker.remove_flow(name)
        return Response(status_code=204)


def group_offset_routes(app: FastAPI, worker: AnyWorker) -> None:
    """Consumer-group failover: where a group resumes on the target, and moving it there."""

    def translated(source: str, target: str, group: str, topic_regex: str | None) -> tuple[Any, Any]:
        flow = worker.config.flow(source, target)  # any configured pair: the source may be gone
        check_topic_regex(topic_regex, "topic_regex")
        return flow, translate(flow, [group], topic_regex, timeout=flow.admin_timeout_ms / 1000)

    def rows_of(translation: Any) -> list[TranslatedOffset]:
        return [TranslatedOffset.model_validate(vars(r)) for r in translation.rows]

    @app.get("/flows/{source}/{target}/groups/{group}/offsets")
    async def group_offsets(
        source: str, target: str, group: str, topic_regex: str | None = None
    ) -> GroupOffsets:
        """Where ``group`` resumes on the target: checkpoints first, offset syncs for the rest."""
        _, translation = await asyncio.to_thread(translated, source, target, group, topic_regex)
        return GroupOffsets(rows=rows_of(translation), notes=translation.notes)

    @app.post("/flows/{source}/{target}/groups/{group}/offsets")
    async def move_group(source: str, target: str, group: str, body: OffsetsRequest) -> GroupOffsets:
        """Commit the translated offsets to ``group`` on the target (failover); a dry run by default."""

        def run() -> GroupOffsets:
            flow, translation = translated(source, target, group, body.topic_regex)
            before = apply(flow, translation.rows, body.execute, timeout=flow.admin_timeout_ms / 1000)
            previous = {str(tp): o.offset for tp, o in before.get(group, {}).items()}
            return GroupOffsets(rows=rows_of(translation), notes=translation.notes,
                                executed=body.execute, previous=previous)

        return await asyncio.to_thread(run)
