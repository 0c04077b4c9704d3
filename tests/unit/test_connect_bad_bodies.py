"""A request body the Connect facade cannot use is the client's error, not the server's: on each route
that takes a body, one that is not JSON (cut short, not UTF-8, nested too deep for the parser) or is
JSON but no object (a list, a string) answers 400 in Connect's body ``{"error_code": 400, "message"}``
and logs nothing at ERROR (issue 33: FastAPI's own 400 for a body it cannot parse was a logged 500).
The ``/flows`` API keeps its own body (no broker needed: the worker's runners are faked)."""

from __future__ import annotations

import logging

import pytest

from tests.support.app_client import AppClient

#: the six routes of the facade that read a JSON object from the body
ROUTES = [
    ("POST", "/connectors"),
    ("PUT", "/connectors/m/config"),
    ("PATCH", "/connectors/m/config"),
    ("PATCH", "/connectors/m/offsets"),
    ("PUT", "/connector-plugins/MirrorSourceConnector/config/validate"),
    ("PUT", "/admin/loggers/mm2py"),
]

#: bodies no JSON parser reads (FastAPI answers the last two with its own HTTPException)
NOT_JSON = {
    "cut short": b'{"name": ',
    "plain text": b"not json",
    "not UTF-8": b'{"name": "\xc3\x28"}',
    "nested too deep": b"[" * 100_000,
}

#: JSON, but not the object the routes expect
NOT_AN_OBJECT = {"a list": b'["m", 1]', "a string": b'"config"', "null": b"null"}


@pytest.fixture(scope="module")
def http() -> AppClient:
    return AppClient()


def _bad_request(http: AppClient, caplog: pytest.LogCaptureFixture, method: str, path: str,
                 body: bytes) -> str:
    caplog.set_level(logging.WARNING)
    r = http.request(method, path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, (method, path, r.text)
    answer = r.json()
    assert set(answer) == {"error_code", "message"} and answer["error_code"] == 400, answer
    errors = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert not errors, [rec.getMessage() for rec in errors]
    return str(answer["message"])


@pytest.mark.parametrize("body", NOT_JSON.values(), ids=NOT_JSON.keys())
@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_a_body_that_is_not_json_is_a_connect_400_not_logged(
    http: AppClient, caplog: pytest.LogCaptureFixture, method: str, path: str, body: bytes
) -> None:
    message = _bad_request(http, caplog, method, path, body)
    assert "pars" in message.lower(), message  # it says the body could not be parsed


@pytest.mark.parametrize("body", NOT_AN_OBJECT.values(), ids=NOT_AN_OBJECT.keys())
@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_json_that_is_no_object_is_a_connect_400_not_logged(
    http: AppClient, caplog: pytest.LogCaptureFixture, method: str, path: str, body: bytes
) -> None:
    assert _bad_request(http, caplog, method, path, body) == "the request body is not a JSON object"


def test_a_body_that_is_not_json_keeps_the_flows_api_body(http: AppClient) -> None:
    r = http.request("POST", "/flows", content=b'{"source": ', headers={"content-type": "application/json"})
    assert r.status_code == 422 and "error_code" not in r.json() and "not valid JSON" in r.json()["error"]
