"""Errors of the Kafka Connect facade in Connect's body: ``{"error_code": <status>, "message": "..."}``.

Its routes (:class:`ConnectRoute`) answer their own and the lower layers' errors so (an unexpected
one as a 500 with its message, logged with its stack); a path under
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
from mm2py.runtime.flow_offsets import OffsetResetError
from mm2py.runtime.steering import (
    ClusterConflictError,
    FlowConflictError,
    FlowExistsError,
    FlowNotFoundError,
    FlowStateError,
)

__all__ = ["FACADE_PREFIXES", "ConnectError", "ConnectRoute", "install"]

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


def _in_facade(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in FACADE_PREFIXES)


def install(app: FastAPI) -> None:
    """Unknown routes and methods under the facade's prefixes answered in Connect's body; every
    path served with a trailing slash as without it."""

    async def not_routed(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if not _in_facade(request.url.path):
            return await http_exception_handler(request, exc)
        phrase = HTTPStatus(exc.status_code).phrase
        return _error(exc.status_code, f"HTTP {exc.status_code} {phrase}", exc.headers)

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
                first = exc.errors()[0] if exc.errors() else {}
                if tuple(first.get("loc", ()))[:1] == ("path",):  # e.g. a task id that is no number
                    return _error(404, "HTTP 404 Not Found")
                where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
                return _error(400, f"invalid request {where!r}: {first.get('msg', 'malformed')}")
            except Mm2pyError as exc:
                status = next(code for kind, code in _STATUS if isinstance(exc, kind))
                return _error(status, str(exc))
            except Exception as exc:  # anything else: Connect's 500 with the message, logged
                log.exception("%s %s failed", request.method, request.url.path)
                return _error(500, f"{type(exc).__name__}: {exc}")

        return guarded
