"""Errors of the Kafka Connect facade in Connect's body: ``{"error_code": <status>, "message": "..."}``.

Its routes (:class:`ConnectRoute`) answer their own and the lower layers' errors so (an unexpected
one as a 500 with its message, logged with its stack), and FastAPI's and Starlette's own answers
with their status (a body that is not JSON, or not a JSON object, is a 400); a path under
the facade's prefixes that no route serves (a 404 or 405 of the router) too
(:func:`install`, which also lets every path answer with a trailing slash as it does without
one: Connect serves ``/connectors/`` as ``/connectors``, where FastAPI would redirect).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from mm2py.config.errors import ConfigError
from mm2py.errors import ClusterUnreachableError, Mm2pyError, SecurityError
from mm2py.operations.flow_offsets import OffsetResetError
from mm2py.runtime.steering import (
    ClusterConflictError,
    FlowConflictError,
    FlowExistsError,
    FlowNotFoundError,
    FlowStateError,
)

__all__ = ["FACADE_PREFIXES", "ConnectError", "ConnectRoute", "in_facade", "install"]

log = logging.getLogger(__name__)

#: the paths Kafka Connect's REST API has (besides ``/``, served by the facade too)
FACADE_PREFIXES = ("/connectors", "/connector-plugins", "/admin")


class ConnectError(Mm2pyError):
    """An answer of the facade's own (unknown connector, a name taken, ...) with its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


#: errors of the layers below as Connect answers them (a reset while running is a 400 in Connect)
_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (ConfigError, 400), (OffsetResetError, 400), (FlowStateError, 400), (FlowNotFoundError, 404),
    (FlowExistsError, 409), (FlowConflictError, 409), (ClusterConflictError, 409), (SecurityError, 401),
    (ClusterUnreachableError, 503), (Mm2pyError, 500),
)


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error_code": status, "message": message}, status_code=status, headers=headers)


def _http_error(exc: HTTPException) -> JSONResponse:
    """An answer of FastAPI or Starlette with its status: ``HTTP 404 Not Found`` where it says no
    more than its status, else its detail and the error behind it (why a body could not be parsed:
    bytes that are not UTF-8, JSON nested too deep)."""
    try:
        phrase = HTTPStatus(exc.status_code).phrase
    except ValueError:
        phrase = ""
    detail = exc.detail if isinstance(exc.detail, str) else ""
    message = f"HTTP {exc.status_code} {phrase}".rstrip() if detail in ("", phrase) else detail
    if exc.__cause__ is not None and exc.status_code < 500:
        message = f"{message}: {exc.__cause__}"
    return _error(exc.status_code, message, exc.headers)


#: a request body of the wrong JSON type (a list, a string, null) where a JSON object is expected
_NOT_AN_OBJECT = frozenset({"dict_type", "model_type", "model_attributes_type"})


def _invalid(exc: RequestValidationError) -> JSONResponse:
    """A request FastAPI could not bind: a path parameter of the wrong type is a 404 (no such
    route); a body that is not JSON, not a JSON object, or without a required field is a 400."""
    first = exc.errors()[0] if exc.errors() else {}
    loc = tuple(first.get("loc", ()))
    if loc[:1] == ("path",):  # e.g. a task id that is no number
        return _error(404, "HTTP 404 Not Found")
    if first.get("type") == "json_invalid":
        reason = first.get("ctx", {}).get("error") or first.get("msg", "malformed")
        at = f" (at character {loc[1]})" if len(loc) > 1 else ""
        return _error(400, f"the request body could not be parsed as JSON: {reason}{at}")
    if loc == ("body",) and first.get("type") in _NOT_AN_OBJECT:
        return _error(400, "the request body is not a JSON object")
    where = ".".join(str(p) for p in loc if p != "body") or "body"
    return _error(400, f"invalid request {where!r}: {first.get('msg', 'malformed')}")


def in_facade(path: str) -> bool:
    """Whether ``path`` is one of the facade's (under Connect's prefixes)."""
    return any(path == p or path.startswith(p + "/") for p in FACADE_PREFIXES)


def install(app: FastAPI) -> None:
    """Unknown routes and methods under the facade's prefixes answered in Connect's body; every
    path served with a trailing slash as without it."""

    async def not_routed(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if not in_facade(request.url.path):
            return await http_exception_handler(request, exc)
        return _http_error(exc)

    app.add_exception_handler(HTTPException, not_routed)
    app.add_middleware(_TrailingSlash)


class _TrailingSlash:
    """``/connectors/`` is ``/connectors`` (no redirect): trailing slashes are dropped before routing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and len(path) > 1 and path.endswith("/"):
            scope = {**scope, "path": path.rstrip("/") or "/"}
            raw = scope.get("raw_path")
            if isinstance(raw, bytes):
                scope["raw_path"] = raw.rstrip(b"/") or b"/"
        await self.app(scope, receive, send)


class ConnectRoute(APIRoute):
    """Routes whose errors use Connect's body instead of the ``/flows`` API's."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handle(request)
            except ConnectError as exc:
                return _error(exc.status, str(exc))
            except RequestValidationError as exc:
                return _invalid(exc)
            except HTTPException as exc:  # FastAPI's own answer, e.g. a 400 for a body it cannot parse
                return _http_error(exc)
            except Mm2pyError as exc:
                status = next(code for kind, code in _STATUS if isinstance(exc, kind))
                return _error(status, str(exc))
            except Exception as exc:  # anything else: Connect's 500 with the message, logged
                log.exception("%s %s failed", request.method, request.url.path)
                return _error(500, f"{type(exc).__name__}: {exc}")

        return guarded
