"""The HTTP API of a running worker: create, inspect, change, restart and remove mirror flows.

A flow is addressed by its name, ``/flows/{name}`` (a pair may have several flows, each with its own
name; a pair's unnamed flow is ``east->west``), or by its pair, ``/flows/{source}/{target}``, where
the pair has one (:mod:`mm2py.rest_api.flow_paths`). Bodies use MM2's setting names; every change is
validated like the configuration file (the error names the key) before anything is touched, and a
flow whose clusters cannot be reached is not left half-created.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from mm2py.config.errors import ConfigError
from mm2py.errors import ClusterUnreachableError, Mm2pyError, SecurityError
from mm2py.failover import (
    FailoverError,
    GroupActiveError,
    UnknownGroupError,
    apply,
    check_topic_regex,
    translate,
)
from mm2py.rest_api import connect_errors
from mm2py.rest_api.connect import Facade
from mm2py.rest_api.connect_control import control_router
from mm2py.rest_api.connect_plugins import plugins_router
from mm2py.rest_api.connect_routes import connect_router
from mm2py.rest_api.flow_control import flow_control_router
from mm2py.rest_api.flow_paths import PairPaths
from mm2py.rest_api.loggers import loggers_router
from mm2py.rest_api.models import (
    ClusterInfo,
    ErrorBody,
    FlowCreate,
    FlowList,
    FlowStatus,
    FlowUpdate,
    GroupOffsets,
    OffsetsRequest,
    TranslatedOffset,
)
from mm2py.rest_api.translate_routes import translate_router
from mm2py.rest_api.ui import page_address, read_only_guard, ui_router
from mm2py.rest_api.ui_samples import Sampler
from mm2py.runtime.flow_offsets import OffsetResetError
from mm2py.runtime.flows import FlowRunnerBase
from mm2py.runtime.metrics import WorkerCollector
from mm2py.runtime.metrics_page import PartitionTimesPage, metrics_page
from mm2py.runtime.steering import (
    ClusterConflictError,
    FlowConflictError,
    FlowExistsError,
    FlowNotFoundError,
    FlowStateError,
)
from mm2py.runtime.worker_base import WorkerBase

#: a worker of any runtime (the in-process ``Worker``, the ``SparkWorker``) and its flow runners
AnyWorker = WorkerBase[Any]
AnyRunner = FlowRunnerBase[Any]

#: setting names whose values are not shown back (credentials)
_SECRET = re.compile(r"password|secret|jaas|token|credential|keystore\.key", re.IGNORECASE)

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

_ERRORS = {400: {"model": ErrorBody}, 404: {"model": ErrorBody}, 409: {"model": ErrorBody},
           401: {"model": ErrorBody}, 422: {"model": ErrorBody}, 503: {"model": ErrorBody}}


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


def _status(runner: AnyRunner) -> FlowStatus:
    return FlowStatus.model_validate(runner.status())


def _redacted(values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in values.items():
        if isinstance(v, dict):
            out[k] = _redacted(v)
        elif _SECRET.search(k):
            out[k] = "[hidden]"
        else:
            out[k] = list(v) if isinstance(v, tuple) else v
    return out


def create_app(worker: AnyWorker, *, read_only: bool = False, ui_sample_seconds: float = 5.0) -> FastAPI:
    """The worker's API. ``read_only``: every change is refused (403) and the page at ``/ui`` shows
    no actions; ``app.state.ui_sampler`` keeps the page's 15 minutes of figures once started
    (:class:`mm2py.rest_api.server.RestServer` starts and stops it with the server)."""
    app = FastAPI(
        title="mm2py",
        summary="Raw-batch Kafka mirroring: steer the mirror flows of a running worker",
        responses=_ERRORS,  # type: ignore[arg-type]
    )
    _error_handlers(app)
    _flow_routes(app, worker)
    _group_offset_routes(app, worker)
    app.include_router(flow_control_router(worker))
    app.include_router(translate_router(worker))  # offsets translated either way, failback
    # the Kafka Connect-shaped facade, errors (unknown routes under it included) in Connect's shape
    facade = Facade(worker)
    for router in (connect_router(facade), control_router(facade), plugins_router(worker), loggers_router()):
        app.include_router(router)
    app.add_middleware(PairPaths)
    connect_errors.install(app)
    _metrics_route(app, worker)
    sampler = Sampler(lambda: worker.flows, interval=ui_sample_seconds)
    app.state.ui_sampler = sampler
    app.include_router(ui_router(worker, sampler, read_only))
    page_address(app)
    if read_only:
        read_only_guard(app)
    return app


def _error_handlers(app: FastAPI) -> None:
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


def _flow_routes(app: FastAPI, worker: AnyWorker) -> None:
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
        return FlowList(flows=[_status(r) for r in worker.flows.values()])

    @app.post("/flows", status_code=201)
    async def create_flow(body: FlowCreate) -> FlowStatus:
        clusters = {alias: spec.keys() for alias, spec in body.clusters.items()}
        runner = await worker.add_flow(body.source, body.target, body.all_settings(), clusters,
                                       name=body.name)
        return _status(runner)

    @app.get("/flows/{name}")
    async def get_flow(name: str) -> FlowStatus:
        """A flow by name (``/flows/{source}/{target}``: the pair's, where it has one)."""
        return _status(worker.flow(name))

    @app.get("/flows/{name}/config")
    async def get_config(name: str) -> dict[str, Any]:
        flow = worker.flow(name).flow
        data = flow.model_dump(by_alias=True, exclude={"source_cluster", "target_cluster", "label"})
        return _redacted({"name": flow.name, **data})

    @app.patch("/flows/{name}")
    async def update_flow(name: str, body: FlowUpdate) -> FlowStatus:
        settings = body.all_settings()
        if not settings:
            return _status(worker.flow(name))
        return _status(await worker.update_flow(name, settings))

    @app.post("/flows/{name}/restart")
    async def restart_flow(name: str) -> FlowStatus:
        return _status(await worker.restart_flow(name))

    @app.delete("/flows/{name}", status_code=204)
    async def delete_flow(name: str) -> Response:
        await worker.remove_flow(name)
        return Response(status_code=204)


def _group_offset_routes(app: FastAPI, worker: AnyWorker) -> None:
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


def _metrics_route(app: FastAPI, worker: AnyWorker) -> None:
    """Prometheus metrics of the worker, read at scrape time."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(WorkerCollector(worker, partition_times=False))
    times = PartitionTimesPage(worker)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(metrics_page(registry, times), media_type=CONTENT_TYPE_LATEST)
