"""The worker's HTTP API assembled: the ``/flows`` API (:mod:`mm2py.rest_api.flows`), the Kafka
Connect-shaped facade (:mod:`mm2py.rest_api.connect`), the operator page (:mod:`mm2py.rest_api.ui`),
the worker's Prometheus metrics, and ``--rest-read-only`` over all of them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from mm2py.rest_api.connect import errors as connect_errors
from mm2py.rest_api.connect.control import control_router
from mm2py.rest_api.connect.facade import Facade
from mm2py.rest_api.connect.loggers import loggers_router
from mm2py.rest_api.connect.plugins import plugins_router
from mm2py.rest_api.connect.routes import connect_router
from mm2py.rest_api.flows.control import flow_control_router
from mm2py.rest_api.flows.paths import PairPaths
from mm2py.rest_api.flows.routes import ERROR_RESPONSES, flow_errors, flow_routes, group_offset_routes
from mm2py.rest_api.flows.translate import translate_router
from mm2py.rest_api.security.basic import BasicAuth
from mm2py.rest_api.security.guard import Guard
from mm2py.rest_api.security.settings import RestSettings
from mm2py.rest_api.security.tokens import JwksTokens
from mm2py.rest_api.shared import AnyWorker
from mm2py.rest_api.ui.page import page_address, ui_router
from mm2py.rest_api.ui.sampler import Sampler
from mm2py.runtime.metrics import WorkerCollector
from mm2py.runtime.metrics_page import PartitionTimesPage, metrics_page

__all__ = ["create_app", "guard", "metrics_app", "read_only_guard"]

#: mutating calls that change nothing (Connect's config validation): allowed when read-only
_READ_ONLY_EXEMPT = ("/config/validate",)


def create_app(worker: AnyWorker, *, read_only: bool = False, ui_sample_seconds: float = 5.0,
               security: RestSettings | None = None) -> FastAPI:
    """The worker's API. ``read_only``: every change is refused (403) and the page at ``/ui`` shows
    no actions; ``app.state.ui_sampler`` keeps the page's 15 minutes of figures once started
    (:class:`mm2py.rest_api.server.RestServer` starts and stops it with the server). ``security``:
    authentication, read-only callers and the audit line of every change (:mod:`.security.guard`)."""
    app = FastAPI(
        title="mm2py",
        summary="Raw-batch Kafka mirroring: steer the mirror flows of a running worker",
        responses=ERROR_RESPONSES,
    )
    flow_errors(app)
    flow_routes(app, worker)
    group_offset_routes(app, worker)
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
    if security is not None:
        guard(app, security)
    return app


def guard(app: FastAPI, security: RestSettings) -> None:
    """``security``'s authentication, read-only callers and audit lines in front of ``app``."""
    basic = BasicAuth(security.jaas_file) if security.jaas_file is not None else None
    tokens = JwksTokens(security.jwt) if security.jwt is not None else None
    app.add_middleware(Guard, settings=security, in_connect=connect_errors.in_facade, basic=basic,
                       tokens=tokens)


def metrics_app(registry: CollectorRegistry, times: PartitionTimesPage, security: RestSettings) -> FastAPI:
    """``--metrics-port`` with ``--metrics-secured``: ``GET /metrics`` behind the REST API's
    authentication (its TLS is the server's), the page written in a thread as the plain port's is."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    @app.get("/metrics")
    async def metrics() -> Response:
        page = await asyncio.to_thread(metrics_page, registry, times)
        return Response(page, media_type=CONTENT_TYPE_LATEST)

    guard(app, security)
    return app


def read_only_guard(app: FastAPI) -> None:
    """Refuse every change (POST, PUT, PATCH, DELETE) with 403, in the body shape of the route's API."""

    @app.middleware("http")
    async def refuse_changes(request: Request, call_next: Any) -> Response:
        path = request.url.path.rstrip("/")
        if request.method in {"GET", "HEAD", "OPTIONS"} or path.endswith(_READ_ONLY_EXEMPT):
            response: Response = await call_next(request)
            return response
        message = "this worker's REST API is read-only (mm2py run --rest-read-only): nothing was changed"
        if connect_errors.in_facade(path):
            return JSONResponse({"error_code": 403, "message": message}, 403)
        return JSONResponse({"error": message}, 403)


def _metrics_route(app: FastAPI, worker: AnyWorker) -> None:
    """Prometheus metrics of the worker, read at scrape time."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(WorkerCollector(worker, partition_times=False))
    times = PartitionTimesPage(worker)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(metrics_page(registry, times), media_type=CONTENT_TYPE_LATEST)
