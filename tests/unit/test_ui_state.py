"""The operator page's endpoints: the page and its files, ``/ui/state`` in one answer, a
partition's series, and the read-only mode of the whole API (no brokers: flows not started)."""

from __future__ import annotations

import json
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mm2py.engine.latency import PartitionTimes
from mm2py.rest_api.app import create_app
from mm2py.rest_api.ui.page import STATIC
from mm2py.runtime.inprocess import Worker
from tests.support.brokers import mirror_config
from tests.support.fake_tasks import TP0, TP1, Clock, Task

ROOT = Path(__file__).resolve().parents[2]

#: nothing listens there: the flows are built (settings checked) but never started here
CLUSTERS = {"east": "127.0.0.1:9", "west": "127.0.0.1:9"}


@pytest.fixture
def worker() -> Worker:
    config = mirror_config(CLUSTERS, {"east->west": {"enabled": True, "topics": "orders, payments"}})
    return Worker(config)  # type: ignore[arg-type]


def _client(worker: Worker, **options: Any) -> tuple[TestClient, Any]:
    app = create_app(worker, **options)
    return TestClient(app), app.state.ui_sampler


def test_the_page_and_its_files_are_served_from_the_package(worker: Worker) -> None:
    http, _ = _client(worker)
    page = http.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'src="ui/app.js"' in page.text and 'href="ui/style.css"' in page.text
    assert http.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
    assert "polyline" in http.get("/ui/app.js").text  # the charts are its own SVG
    assert http.get("/ui/style.css").status_code == 200
    # with a trailing slash the page's relative addresses would miss: sent to /ui, relatively
    slash = http.get("/ui/", follow_redirects=False)
    assert slash.status_code == 308 and slash.headers["location"] == "../ui"
    assert http.get("/ui/").url.path == "/ui"


def test_the_pages_files_are_package_data_so_a_wheel_ships_them() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["mm2py.rest_api.ui"]
    files = {p.name for p in (ROOT / "rest_api" / "ui" / "static").iterdir()}
    assert files == set(STATIC)  # each file is served, and only those
    assert all(any(fnmatch(f"static/{name}", pattern) for pattern in patterns) for name in files)


def test_the_state_has_every_flow_its_filters_tasks_partitions_and_series(worker: Worker) -> None:
    http, sampler = _client(worker)
    clock = Clock()
    sampler.clock = clock
    runner = worker.flows["east->west"]
    task = Task((TP0, TP1), acked={TP0: 10, TP1: 0})
    task.metrics.lag = {TP0: 40}
    task.metrics.times = {TP0: PartitionTimes(lag_seconds=3.0)}
    runner.tasks[0] = task  # type: ignore[assignment]
    sampler.sample()
    clock.now += 5
    task.metrics.records, task.acked = 50, {TP0: 60, TP1: 0}
    task.metrics.times[TP0].replication.observe(0.02)
    sampler.sample()

    body = http.get("/ui/state")
    assert body.headers["content-type"] == "application/json"
    state = json.loads(body.text)
    assert (state["read_only"], state["runtime"], state["clusters"]) == (False, "inprocess", ["east", "west"])
    assert state["times"] == [1000.0, 1005.0]
    (flow,) = state["flows"]
    assert (flow["name"], flow["path"], flow["source"], flow["target"]) == (
        "east->west", "/flows/east-%3Ewest", "east", "west")
    assert flow["state"] == "UNASSIGNED" and flow["filters"]["topics"] == ["orders", "payments"]
    assert flow["tasks"][0]["partitions"] == 2 and flow["tasks"][0]["records"] == 50
    assert flow["now"]["records_per_s"] == 10.0 and flow["now"]["lag_seconds"] == 3.0
    assert flow["now"]["p99"] == 0.025
    assert flow["series"]["records_per_s"] == [None, 10.0] and len(flow["series"]["p50"]) == 2
    assert flow["partitions"] == [["orders", 0, 0, 40, 3.0, 10.0, 0.025, 0.025],
                                  ["orders", 1, 0, 0, 0.0, 0.0, None, None]]

    one = http.get("/ui/partition", params={"flow": "east->west", "topic": "orders", "partition": 0}).json()
    assert one["series"]["lag_records"] == [40.0, 40.0] and one["times"] == [1000.0, 1005.0]
    missing = http.get("/ui/partition", params={"flow": "east->west", "topic": "nope", "partition": 0})
    assert missing.status_code == 404 and "nope-0" in missing.json()["error"]


def test_a_failed_task_shows_its_last_error_with_its_trace(worker: Worker) -> None:
    from mm2py.engine.task_contract import TaskState

    http, _ = _client(worker)
    trace = "Traceback (most recent call last):\n  ...\nClusterUnreachableError: west: no broker answered"
    worker.flows["east->west"].tasks[1] = Task((TP1,), state=TaskState.FAILED, trace=trace)  # type: ignore[assignment]
    (task,) = http.get("/ui/state").json()["flows"][0]["tasks"]
    assert (task["id"], task["state"], task["trace"]) == (1, "FAILED", trace)


def test_a_tasks_verified_batches_and_alarms_are_on_the_page(worker: Worker) -> None:
    from mm2py.engine.losses import Alarm, LossWatch, Policy

    http, _ = _client(worker)
    task = Task((TP0,))
    task.metrics.audit_verified_batches = 7
    losses = LossWatch("0", task.metrics, {Alarm.FOREIGN_RECORDS: Policy.SKIP}, lambda: 1000.0)
    assert losses.target_acked(TP0, 6, 8) is None  # skip: counted and kept, the task goes on
    task.losses = losses  # type: ignore[attr-defined]
    worker.flows["east->west"].tasks[0] = task  # type: ignore[assignment]
    (row,) = http.get("/ui/state").json()["flows"][0]["tasks"]
    assert (row["verified_batches"], row["alarms"]) == (7, {"target.foreign": 1})
    (words,) = row["recent_alarms"]
    assert "target offsets 6..7 (2) hold records the mirror did not write" in words
    # the page's table has a column for each, and the newest alarms in words
    script = http.get("/ui/app.js").text
    assert "t.verified_batches" in script and "t.recent_alarms" in script


def test_a_partition_held_at_a_record_too_large_is_named_on_the_page(worker: Worker) -> None:
    http, _ = _client(worker)
    task = Task((TP0,))
    task.metrics.split_batches = 12
    task.held_partitions = [str(TP0)]  # type: ignore[attr-defined]
    worker.flows["east->west"].tasks[0] = task  # type: ignore[assignment]
    (row,) = http.get("/ui/state").json()["flows"][0]["tasks"]
    assert (row["split_batches"], row["held_partitions"]) == (12, [str(TP0)])
    assert "t.held_partitions" in http.get("/ui/app.js").text


def test_the_first_state_samples_at_once(worker: Worker) -> None:
    http, sampler = _client(worker)
    assert sampler.count == 0
    state = http.get("/ui/state").json()
    assert sampler.count == 1 and len(state["times"]) == 1


def test_read_only_refuses_every_change_of_the_api_and_the_page_is_told(worker: Worker) -> None:
    http, _ = _client(worker, read_only=True)
    assert http.get("/ui/state").json()["read_only"] is True
    changes = (("POST", "/flows"), ("PATCH", "/flows/east/west"), ("POST", "/flows/east/west/pause"),
               ("DELETE", "/flows/east/west/offsets"), ("PUT", "/admin/loggers/root"))
    for method, path in changes:
        r = http.request(method, path, json={})
        assert r.status_code == 403, (method, path, r.text)
        message = r.json().get("error") or r.json()["message"]
        assert "read-only" in message
    assert http.request("DELETE", "/connectors/x").json()["error_code"] == 403  # Connect's shape there
    assert http.get("/flows").status_code == 200 and http.get("/metrics").status_code == 200
    # a check that changes nothing stays open (Connect's config validation)
    r = http.put("/connector-plugins/MirrorSourceConnector/config/validate", json={})
    assert r.status_code != 403


def test_mm2py_run_takes_rest_read_only() -> None:
    from mm2py.cli import build_parser

    args = build_parser().parse_args(["run", "-c", "mm2.properties", "--rest-read-only"])
    assert args.rest_read_only is True
    assert build_parser().parse_args(["run", "--config", "mm2.properties"]).rest_read_only is False
