"""The ``/connectors`` routes of the Connect facade: list, read, create, change and delete
(:class:`mm2py.rest_api.connect.facade.Facade` does the work; :mod:`mm2py.rest_api.connect.control`
has the state changes, offsets and topics)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, BeforeValidator, Field

from mm2py.rest_api.connect.errors import ConnectRoute
from mm2py.rest_api.connect.facade import Facade, worker_id
from mm2py.rest_api.shared import redacted

__all__ = ["connect_router"]

InitialState = Annotated[Literal["RUNNING", "PAUSED", "STOPPED"],
                         BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v)]


class NewConnector(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    config: dict[str, Any]
    initial_state: InitialState | None = None  # KIP-980



def connect_router(facade: Facade) -> APIRouter:
    """The ``/connectors`` routes that create, read, change and delete connectors."""
    router = APIRouter(route_class=ConnectRoute, tags=["Kafka Connect facade"])
    _read_routes(router, facade)
    _change_routes(router, facade)
    return router


def _read_routes(router: APIRouter, facade: Facade) -> None:
    @router.get("/connectors")
    async def list_connectors(request: Request, expand: Annotated[list[str] | None, Query()] = None) -> Any:
        names = facade.names()
        if expand is None:
            return names
        out: dict[str, dict[str, Any]] = {}
        for name in names:
            out[name] = {}
            if "status" in expand:
                out[name]["status"] = facade.status(name, worker_id(request))
            if "info" in expand:
                out[name]["info"] = facade.info(name)
        return out

    @router.get("/connectors/{name}")
    async def get_connector(name: str) -> dict[str, Any]:
        return facade.info(name)

    @router.get("/connectors/{name}/config")
    async def get_config(name: str) -> dict[str, str]:
        return redacted(facade.lookup(name)[2])

    @router.get("/connectors/{name}/status")
    async def get_status(name: str, request: Request) -> dict[str, Any]:
        return facade.status(name, worker_id(request))

    @router.get("/connectors/{name}/tasks")
    async def get_tasks(name: str) -> list[dict[str, Any]]:
        info = facade.info(name)
        return [{"id": t, "config": info["config"]} for t in info["tasks"]]

    @router.get("/connectors/{name}/tasks/{task}/status")
    async def get_task_status(name: str, task: int, request: Request) -> dict[str, Any]:
        return facade.task_status(name, task, worker_id(request))


def _change_routes(router: APIRouter, facade: Facade) -> None:
    @router.post("/connectors", status_code=201)
    async def create_connector(body: NewConnector, response: Response) -> dict[str, Any]:
        name = body.name.strip()
        await facade.put(name, body.config, create_only=True, initial_state=body.initial_state)
        response.headers["Location"] = f"/connectors/{quote(name, safe='')}"
        return facade.info(name)

    @router.put("/connectors/{name}/config")
    async def put_config(name: str, config: dict[str, Any], response: Response) -> dict[str, Any]:
        created = await facade.put(name, config, create_only=False)
        response.status_code = 201 if created else 200
        if created:
            response.headers["Location"] = f"/connectors/{quote(name, safe='')}"
        return facade.info(name)

    @router.patch("/connectors/{name}/config")
    async def patch_config(name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """KIP-477: merge into the config (a null value removes the key); 200 with the info."""
        await facade.patch(name, changes)
        return facade.info(name)

    @router.delete("/connectors/{name}", status_code=204)
    async def delete(name: str) -> Response:
        await facade.delete(name)
        return Response(status_code=204)
