"""The worker's state file has one writer: the worker, under its steering lock. A change through
``/flows`` and one through the Connect facade made at once, with the data path telling an active
topic meanwhile, all reach the file (runners faked: no broker needed)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from mm2py.config.models import FlowConfig
from mm2py.rest_api.app import create_app
from mm2py.runtime.flows import Claims
from tests.support.fake_flows import FakeRunner, FakeWorker


class _Gate:
    """Holds the first runner that stops until released (the steering lock is held meanwhile)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()


class _GatedRunner(FakeRunner):
    gate: _Gate | None = None

    async def stop(self) -> None:
        gate, _GatedRunner.gate = _GatedRunner.gate, None
        if gate is not None:
            gate.entered.set()
            await gate.release.wait()
        await super().stop()


class _GatedWorker(FakeWorker):
    def _new_runner(self, flow: FlowConfig, claims: Claims) -> FakeRunner:
        return _GatedRunner(flow, claims)


def test_a_flows_change_and_a_connector_change_at_once_both_reach_the_file(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    connector = {"connector.class": "MirrorSourceConnector", "source.cluster.alias": "east",
                 "target.cluster.alias": "west", "topics": "orders"}

    async def run() -> tuple[Any, Any]:
        worker = _GatedWorker(state, **{"east->west.enabled": "true", "east->west.topics": "payments"})
        await worker.start()
        gate = _GatedRunner.gate = _Gate()
        transport = httpx.ASGITransport(app=create_app(worker), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://mm2py") as client:
            # a restarting change: the lock stays held while the old runner stops
            change = {"settings": {"tasks.max": 3}}
            patch = asyncio.create_task(client.patch("/flows/east->west", json=change))
            await asyncio.wait_for(gate.entered.wait(), 30)
            put = asyncio.create_task(client.put("/connectors/fast/config", json=connector))
            worker.active_topics.record(worker.flows["east->west"].flow, {"payments"})  # the data path
            for _ in range(50):  # let the connector's change get as far as it can
                await asyncio.sleep(0)
            assert not put.done()  # it waits for the lock the /flows change holds
            on_disk = json.loads(state.read_text())
            assert "fast" not in on_disk["sections"].get("connectors", {})
            gate.release.set()
            answers = await asyncio.wait_for(asyncio.gather(patch, put), 30)
        await worker.state_file.written()
        return answers

    patched, put = asyncio.run(run())
    assert (patched.status_code, put.status_code) == (200, 201), (patched.text, put.text)
    doc = json.loads(state.read_text())
    assert doc["keys"]["east->west.tasks.max"] == "3"  # the /flows change
    assert doc["sections"]["connectors"]["fast"]["topics"] == "orders"  # the facade's
    assert doc["sections"]["flows"]["fast"]["settings"]["topics"] == "orders"
    assert doc["sections"]["topics"] == {"east->west": ["east.payments"]}  # the data path's
