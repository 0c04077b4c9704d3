"""Errors of the Kafka Connect facade in Connect's body: ``{"error_code": <status>, "message": "..."}``."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from mm2py.config.errors import ConfigError
from mm2py.errors import ClusterUnreachableError, Mm2pyError, SecurityError
from mm2py.runtime.flow_offsets import OffsetResetError
from mm2py.runtime.steering import (
    ClusterConflictError,
    FlowExistsError,
    FlowNotFoundError,
    FlowStateError,
    NotSupportedError,
)

__all__ = ["ConnectError", "ConnectRoute"]


class ConnectError(Mm2pyError):
    """An answer of the facade's own (unknown connector, a name taken, ...) with its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


#: errors of the layers below as Connect answers them (a reset while running is a 400 in Connect)
_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (ConfigError, 400), (OffsetResetError, 400), (FlowStateError, 400), (FlowNotFoundError, 404),
    (FlowExistsError, 409), (ClusterConflictError, 409), (SecurityError, 401),
    (NotSupportedError, 501), (ClusterUnreachableError, 503), (Mm2pyError, 500),
)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error_code": status, "message": message}, status_code=status)


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
                where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
                return _error(400, f"invalid request {where!r}: {first.get('msg', 'malformed')}")
            except Mm2pyError as exc:
                status = next(code for kind, code in _STATUS if isinstance(exc, kind))
                return _error(status, str(exc))

        return guarded
