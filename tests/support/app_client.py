"""Requests to the REST app of a worker whose runners are faked (``fake_flows.FakeWorker``): no
server, no socket, no broker."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from mm2py.rest_api.app import create_app
from tests.support.fake_flows import FakeWorker


class AppClient:
    """Requests straight to the ASGI app (no server, no socket), each on a fresh event loop."""

    def __init__(self) -> None:
        self.app = create_app(FakeWorker())

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://mm2py") as client:
                return await client.request(method, path, **kwargs)

        return asyncio.run(send())

    def get(self, path: str) -> httpx.Response:
        return self.request("GET", path)
