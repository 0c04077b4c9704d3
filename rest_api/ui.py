"""The operator's page at ``GET /ui``: every flow, its tasks and partitions, charts of the last 15
minutes, and the actions of the REST API (the page calls it; same rules, same error messages).

The page is three static files shipped in the package (``rest_api/ui/``: no third-party code; the
charts are inline SVG drawn by its own script). It asks ``GET /ui/state`` every few seconds for
everything it shows in one answer, and ``GET /ui/partition`` for one partition's history. With
``read_only`` (``mm2py run --rest-read-only``) the page shows no actions and the whole REST API
refuses changes: the page has no powers of its own, so a read-only page over a writable API would
hide buttons, not protect anything.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse

from mm2py.protocol.types import TopicPartition
from mm2py.runtime.flows import FlowRunnerBase
from mm2py.runtime.worker_base import WorkerBase
from rest_api.ui_samples import FlowNow, Sampler, finite, series_json

AnyWorker = WorkerBase[Any]

__all__ = ["STATIC", "read_only_guard", "ui_router", "ui_state"]

#: the page's files, served as they are
STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "style.css": "text/css; charset=utf-8"}
_FILTERS = ("topics", "topics.exclude", "groups", "groups.exclude")
#: mutating calls that change nothing (Connect's config validation): allowed when read-only
_READ_ONLY_EXEMPT = ("/config/validate",)


def _static(name: str) -> bytes:
    return resources.files("rest_api").joinpath("ui", name).read_bytes()


def flow_path(runner: FlowRunnerBase[Any]) -> str:
    """The flow's address under the REST API (what the page's actions are sent to)."""
    return f"/flows/{quote(runner.flow.source, safe='')}/{quote(runner.flow.target, safe='')}"


def _runtime(worker: AnyWorker) -> str:
    return "spark" if type(worker).__module__.startswith("mm2py.runtime.spark") else "inprocess"


def _partition_rows(now: FlowNow | None) -> list[list[Any]]:
    """``[topic, partition, task, lag_records, lag_seconds, records_per_s, p50, p99]`` each, in
    partition order."""
    if now is None:
        return []
    columns = [now.tasks.tolist(), now.lag_records.tolist(), now.lag_seconds.tolist(),
               now.records_per_s.tolist(), now.p50.tolist(), now.p99.tolist()]
    rows = []
    for i in sorted(range(len(now.partitions)), key=now.partitions.__getitem__):
        tp = now.partitions[i]
        task, lag, lag_s, rate, p50, p99 = (c[i] for c in columns)
        rows.append([tp.topic, tp.partition, task, int(lag), finite(lag_s), finite(rate, 1),
                     finite(p50, 4), finite(p99, 4)])
    return rows


def _task_row(task_id: int, task: Any) -> dict[str, Any]:
    m = task.metrics
    return {"id": task_id, "state": str(task.state), "trace": task.trace, "partitions": len(task.partitions),
            "records": m.records, "bytes": m.bytes, "lag": sum(m.lag.values()), "restarts": m.restarts}


def _flow_state(worker: AnyWorker, name: str, runner: FlowRunnerBase[Any], sampler: Sampler
                ) -> dict[str, Any]:
    """A flow as the page shows it (``/flows``' status without the tasks' partition lists, which
    the partition rows carry with their figures), keyed by its name in the worker."""
    flow = runner.flow.model_dump(by_alias=True, include={"topics", "topics_exclude", "groups",
                                                           "groups_exclude"})
    now = sampler.now.get(name, {})
    return {
        "name": name, "source": runner.flow.source, "target": runner.flow.target,
        "path": flow_path(runner), "state": str(runner.state), "trace": runner.trace,
        "runtime": _runtime(worker), "filters": {k: list(flow.get(k, ())) for k in _FILTERS},
        "topics": len(runner.last_plan.topics) if runner.last_plan else 0,
        "tasks": [_task_row(i, t) for i, t in sorted(list(runner.tasks.items()))],
        "now": {k: finite(v) for k, v in now.items()},
        "series": series_json({k: r.values() for k, r in sampler.flow_series.get(name, {}).items()}),
        "partition_columns": ["topic", "partition", "task", "lag_records", "lag_seconds",
                              "records_per_s", "p50", "p99"],
        "partitions": _partition_rows(sampler.partitions_now.get(name)),
    }


def ui_state(worker: AnyWorker, sampler: Sampler, read_only: bool) -> dict[str, Any]:
    """Everything the page shows, in one answer."""
    if sampler.count == 0:
        sampler.sample()  # the first page load before the first sample
    return {
        "read_only": read_only, "runtime": _runtime(worker),
        "sample_seconds": sampler.interval, "window_seconds": sampler.window,
        "clusters": sorted(worker.config.clusters),
        "times": [round(t, 3) for t in sampler.times.values()],
        "flows": [_flow_state(worker, name, r, sampler) for name, r in list(worker.flows.items())],
    }


def ui_router(worker: AnyWorker, sampler: Sampler, read_only: bool) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    def page(name: str) -> Response:
        return Response(_static(name), media_type=STATIC[name], headers={"cache-control": "no-cache"})

    @router.get("/ui")
    async def index() -> Response:
        return page("index.html")

    @router.get("/ui/app.js")
    async def script() -> Response:
        return page("app.js")

    @router.get("/ui/style.css")
    async def style() -> Response:
        return page("style.css")

    @router.get("/ui/state")
    async def state() -> Response:
        body = json.dumps(ui_state(worker, sampler, read_only), separators=(",", ":"), allow_nan=False)
        return Response(body, media_type="application/json", headers={"cache-control": "no-store"})

    @router.get("/ui/partition")
    async def partition(flow: str, topic: str, partition: int) -> JSONResponse:
        """One partition's series (``GET /ui/partition?flow=east->west&topic=orders&partition=0``)."""
        table = sampler.partition_series.get(flow)
        series = table.series(TopicPartition(topic, partition)) if table is not None else None
        if series is None:
            return JSONResponse({"error": f"no figures of {topic}-{partition} in flow {flow!r}"}, 404)
        return JSONResponse({"flow": flow, "topic": topic, "partition": partition,
                             "times": [round(t, 3) for t in sampler.times.values()],
                             "series": series_json(series)})

    return router


def read_only_guard(app: FastAPI) -> None:
    """Refuse every change (POST, PUT, PATCH, DELETE) with 403, in the body shape of the route's API."""

    @app.middleware("http")
    async def refuse_changes(request: Request, call_next: Any) -> Response:
        path = request.url.path.rstrip("/")
        if request.method in {"GET", "HEAD", "OPTIONS"} or path.endswith(_READ_ONLY_EXEMPT):
            response: Response = await call_next(request)
            return response
        message = "this worker's REST API is read-only (mm2py run --rest-read-only): nothing was changed"
        if path.split("/")[1:2] and path.split("/")[1] in {"connectors", "connector-plugins", "admin"}:
            return JSONResponse({"error_code": 403, "message": message}, 403)
        return JSONResponse({"error": message}, 403)
