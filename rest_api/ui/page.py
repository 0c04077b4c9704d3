"""The operator's page at ``GET /ui``: every flow, its tasks and partitions, charts of the last 15
minutes, and the actions of the REST API (the page calls it; same rules, same error messages).

The page is three static files shipped in the package (``rest_api/ui/static/``: no third-party
code; the charts are inline SVG drawn by its own script). It asks ``GET /ui/state`` every few seconds for
everything it shows in one answer, and ``GET /ui/partition`` for one partition's history. With
``read_only`` (``mm2py run --rest-read-only``) the page shows no actions and the whole REST API
refuses changes (:func:`mm2py.rest_api.app.read_only_guard`): the page has no powers of its own, so
a read-only page over a writable API would hide buttons, not protect anything.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

from mm2py.engine.losses import alarm_counts, recent_alarms
from mm2py.protocol.types import TopicPartition
from mm2py.rest_api.shared import AnyRunner, AnyWorker
from mm2py.rest_api.ui.sampler import FlowNow, Sampler, finite, series_json

__all__ = ["STATIC", "PageCache", "page_address", "page_answer", "ui_router"]

#: the page's files, served as they are
STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "style.css": "text/css; charset=utf-8"}
_FILTERS = ("topics", "topics.exclude", "groups", "groups.exclude")


def _static(name: str) -> bytes:
    return resources.files("mm2py.rest_api.ui").joinpath("static", name).read_bytes()


def flow_path(runner: AnyRunner) -> str:
    """The flow's address under the REST API (what the page's actions are sent to)."""
    return f"/flows/{quote(runner.name, safe='')}"


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
            "records": m.records, "bytes": m.bytes, "lag": sum(m.lag.values()), "restarts": m.restarts,
            # continuous verification (engine/losses.py): batches verified, alarms by name, the newest
            "verified_batches": m.audit_verified_batches, "alarms": alarm_counts(m),
            "recent_alarms": recent_alarms(task), "split_batches": m.split_batches,
            # partitions held at a record the target refuses even alone (target.too.large: fail)
            "held_partitions": list(getattr(task, "held_partitions", ())),
            # partitions the target refuses, each named with its cause and what to change
            "refused_partitions": list(getattr(task, "refused_partitions", ())),
            "waiting_for_target": list(getattr(task, "waiting_for_target", ()))}


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


class PageCache:
    """Each flow's sampled part of the state (figures, series, partition rows), encoded once per
    sample: refreshes between two samples, and several open pages, share it."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self._count = -1
        self._flows: dict[str, str] = {}
        self._times = ""

    def times(self) -> str:
        self._check()
        if not self._times:
            self._times = _dumps([round(t, 3) for t in self.sampler.times.values()])
        return self._times

    def flow(self, name: str) -> str:
        """``"now":{...},"series":{...},"partition_columns":[...],"partitions":[...]``"""
        self._check()
        text = self._flows.get(name)
        if text is None:
            s = self.sampler
            text = self._flows[name] = _dumps({
                "now": {k: finite(v) for k, v in s.now.get(name, {}).items()},
                "series": series_json({k: r.values() for k, r in s.flow_series.get(name, {}).items()}),
                "partition_columns": ["topic", "partition", "task", "lag_records", "lag_seconds",
                                      "records_per_s", "p50", "p99"],
                "partitions": _partition_rows(s.partitions_now.get(name)),
            })[1:-1]
        return text

    def _check(self) -> None:
        if self._count != self.sampler.count:
            self._count, self._flows, self._times = self.sampler.count, {}, ""


def _flow_answer(worker: AnyWorker, name: str, runner: AnyRunner, cache: PageCache) -> str:
    """A flow as the page shows it (``/flows``' status without the tasks' partition lists, which
    the partition rows carry with their figures), keyed by its name in the worker; as JSON."""
    flow = runner.flow.model_dump(by_alias=True, include={"topics", "topics_exclude", "groups",
                                                           "groups_exclude"})
    live = _dumps({
        "name": name, "source": runner.flow.source, "target": runner.flow.target,
        "path": flow_path(runner), "state": str(runner.state), "trace": runner.trace,
        "runtime": _runtime(worker), "filters": {k: list(flow.get(k, ())) for k in _FILTERS},
        "topics": len(runner.last_plan.topics) if runner.last_plan else 0,
        "tasks": [_task_row(i, t) for i, t in sorted(list(runner.tasks.items()))],
    })
    return f"{live[:-1]},{cache.flow(name)}}}"


def page_answer(worker: AnyWorker, cache: PageCache, read_only: bool) -> str:
    """Everything the page shows, in one answer (JSON): the flows' states and tasks as they are
    now, their figures as of the latest sample."""
    if cache.sampler.count == 0:
        cache.sampler.sample()  # the first page load before the first sample
    head = _dumps({
        "read_only": read_only, "runtime": _runtime(worker),
        "sample_seconds": cache.sampler.interval, "window_seconds": cache.sampler.window,
        "clusters": sorted(worker.config.clusters),
    })
    flows = ",".join(_flow_answer(worker, name, r, cache) for name, r in list(worker.flows.items()))
    return f'{head[:-1]},"times":{cache.times()},"flows":[{flows}]}}'


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

    cache = PageCache(sampler)

    @router.get("/ui/state")
    async def state() -> Response:
        body = page_answer(worker, cache, read_only)
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


def page_address(app: FastAPI) -> None:
    """``/ui/`` is sent to ``/ui`` (relatively: behind a path prefix too), where the page's own
    relative addresses (``ui/app.js``) resolve; the API serves other paths with a trailing slash
    as without it, which would make them ``/ui/ui/app.js`` here. Added after the API's trailing
    slash rule, so it sees the path as asked."""

    @app.middleware("http")
    async def to_the_page(request: Request, call_next: Any) -> Response:
        if request.url.path == "/ui/":
            return RedirectResponse("../ui", status_code=308)
        response: Response = await call_next(request)
        return response
