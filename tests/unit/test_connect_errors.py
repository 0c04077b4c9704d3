"""Every route under the Kafka Connect facade (``/connectors``, ``/connector-plugins``, ``/admin``)
answers errors in Connect's body ``{"error_code", "message"}``: unknown connectors, unknown
sub-routes, wrong methods, bad JSON, bodies of the wrong shape, and errors nobody expected; the
``/flows`` API keeps its own body (no broker needed: the worker's runners are faked)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.app_client import AppClient


@pytest.fixture(scope="module")
def http() -> AppClient:
    return AppClient()


def _connect_error(r: Any, status: int) -> str:
    assert r.status_code == status, (r.request.method, r.request.url, r.text)
    body = r.json()
    assert set(body) == {"error_code", "message"} and body["error_code"] == status, body
    return str(body["message"])


UNKNOWN = [
    ("GET", "/connectors/nobody"), ("GET", "/connectors/nobody/config"), ("GET", "/connectors/nobody/status"),
    ("GET", "/connectors/nobody/tasks"), ("GET", "/connectors/nobody/tasks/0/status"),
    ("GET", "/connectors/nobody/offsets"), ("DELETE", "/connectors/nobody"),
    ("DELETE", "/connectors/nobody/offsets"), ("PUT", "/connectors/nobody/pause"),
    ("PUT", "/connectors/nobody/resume"), ("PUT", "/connectors/nobody/stop"),
    ("POST", "/connectors/nobody/restart"), ("POST", "/connectors/nobody/tasks/0/restart"),
    ("GET", "/connector-plugins/JdbcSourceConnector/config"), ("GET", "/admin/loggers/no.such.logger"),
]


@pytest.mark.parametrize(("method", "path"), UNKNOWN)
def test_an_unknown_connector_plugin_or_logger_is_a_connect_404(http: AppClient, method: str,
                                                                path: str) -> None:
    assert "nobody" in _connect_error(http.request(method, path), 404) or "nobody" not in path


@pytest.mark.parametrize("path", ["/connectors/m/nothing", "/connectors/m/tasks/0/nothing",
                                  "/connectors/m/tasks/first/status", "/connector-plugins/x/y/z",
                                  "/admin/nothing", "/admin", "/connectors/a/b/c/d/e"])
def test_an_unknown_route_under_the_facade_is_a_connect_404(http: AppClient, path: str) -> None:
    assert _connect_error(http.get(path), 404) == "HTTP 404 Not Found"


@pytest.mark.parametrize(("method", "path"), [
    ("DELETE", "/connector-plugins"), ("POST", "/connectors/m"), ("PUT", "/connectors"),
    ("GET", "/connectors/m/pause"), ("POST", "/connectors/m/config"), ("DELETE", "/admin/loggers"),
    ("POST", "/admin/loggers/mm2py"), ("PATCH", "/connectors/m/status"),
])
def test_a_wrong_method_is_a_connect_405(http: AppClient, method: str, path: str) -> None:
    assert _connect_error(http.request(method, path), 405) == "HTTP 405 Method Not Allowed"


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/connectors", b'{"name": "m", '),  # not JSON
    ("POST", "/connectors", b'["m"]'),  # not an object
    ("POST", "/connectors", b'{"name": "m"}'),  # no config
    ("POST", "/connectors", b'{"name": "m", "config": {}, "initial_state": "ASLEEP"}'),
    ("PUT", "/connectors/m/config", b'"config"'),
    ("PUT", "/connectors/m/config", b'{"connector.class": "MirrorSourceConnector"}'),  # no pair
    ("PATCH", "/connectors/m/config", b'{"tasks.max": '),
    ("PATCH", "/connectors/m/offsets", b'{"offsets": []}'),
    ("PUT", "/admin/loggers/mm2py", b'{"lvl": "INFO"}'),
    ("PUT", "/connector-plugins/MirrorSourceConnector/config/validate", b'[1, 2]'),
])
def test_a_bad_body_is_a_connect_400(http: AppClient, method: str, path: str, body: bytes) -> None:
    r = http.request(method, path, content=body, headers={"content-type": "application/json"})
    _connect_error(r, 400)


def test_an_unexpected_error_is_a_connect_500_and_the_flows_api_keeps_its_body(
    http: AppClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("the registry is gone")

    monkeypatch.setattr("mm2py.rest_api.connect.facade.Facade.names", broken)
    assert "the registry is gone" in _connect_error(http.get("/connectors"), 500)
    r = http.get("/flows/nobody")
    assert (r.status_code == 404 and set(r.json()) == {"error", "key"}) or set(r.json()) == {"error"}, r.text
    r = http.get("/flows/a/b/c/d/e")
    assert r.status_code == 404 and "error_code" not in r.json()
