"""``GET /flows/{name}/translate`` (no broker: the flow's syncs and positions are given, the worker's
runners faked): both directions, a pair-shaped path, 400 for bad input and for offsets that do not
translate exactly, 404 for an unknown flow or partition, always the ``/flows`` API's error body."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from mm2py.config.models import FlowConfig
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.mm2_records import OffsetSync
from mm2py.protocol.types import TopicPartition
from mm2py.rest_api.app import create_app
from mm2py.runtime.translator import FlowTranslator
from tests.support.fake_flows import FakeWorker


@pytest.fixture
def get(monkeypatch: pytest.MonkeyPatch) -> Any:
    worker = FakeWorker()  # east->west configured, not running: translated all the same

    def read(cls: type[FlowTranslator], flow: FlowConfig, timeout: float = 30.0) -> FlowTranslator:
        # orders-0: 0-4 plain, 5-9 an aborted transaction and its marker, 10-15 more (target 0-10)
        syncs = OffsetSyncStore()
        for u, d in ((0, 0), (10, 5)):
            syncs.add(OffsetSync(TopicPartition("orders", 0), u, d))
        return cls(flow, syncs, {TopicPartition("orders", 0): Position(16, 11)})

    monkeypatch.setattr(FlowTranslator, "read", classmethod(read))
    app = create_app(worker)

    def send(path: str) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://mm2py") as client:
                return await client.get(path)

        return asyncio.run(go())

    return send


def test_both_directions(get: Any) -> None:
    r = get("/flows/east->west/translate?topic=orders&partition=0&offset=12")
    assert r.status_code == 200, r.text
    assert r.json() == {"flow": "east->west", "direction": "forward", "partition": 0,
                        "source_cluster": "east", "source_topic": "orders", "source_offset": 12,
                        "target_cluster": "west",
                        "target_topic": "east.orders", "target_offset": 7}
    r = get("/flows/east/west/translate?topic=east.orders&partition=0&offset=5&direction=back")  # pair path
    assert r.status_code == 200, r.text
    assert (r.json()["source_offset"], r.json()["direction"]) == (10, "back")
    assert get("/flows/east->west/translate?topic=east.orders&partition=0&offset=11&direction=back"
               ).json()["source_offset"] == 16


@pytest.mark.parametrize(("query", "key"), [
    ("partition=0&offset=1", "topic"), ("topic=orders&offset=1", "partition"),
    ("topic=orders&partition=x&offset=1", "partition"), ("topic=orders&partition=0&offset=-1", "offset"),
    ("topic=orders&partition=0", "offset"), ("topic=orders&partition=0&offset=1&direction=up", "direction"),
])
def test_bad_input_is_a_400_naming_the_parameter(get: Any, query: str, key: str) -> None:
    r = get(f"/flows/east->west/translate?{query}")
    assert r.status_code == 400 and r.json()["key"] == key and set(r.json()) == {"error", "key"}, r.text


def test_what_cannot_be_translated(get: Any) -> None:
    r = get("/flows/east->west/translate?topic=orders&partition=0&offset=17")
    assert r.status_code == 400 and "past what the flow has mirrored" in r.json()["error"]
    r = get("/flows/east->west/translate?topic=orders&partition=3&offset=1")
    assert r.status_code == 404 and "no committed position for orders-3" in r.json()["error"]
    r = get("/flows/east->south/translate?topic=orders&partition=0&offset=1")
    assert r.status_code == 404 and "no flow east->south" in r.json()["error"], r.text
    r = get("/flows/nobody/translate?topic=orders&partition=0&offset=1")
    assert r.status_code == 404 and "no running flow 'nobody'" in r.json()["error"], r.text


def test_failback_routes(monkeypatch: pytest.MonkeyPatch) -> None:
    from mm2py.failover import Row, Translation
    from mm2py.rest_api.flows import translate as translate_routes
    from mm2py.stores.admin import GroupOffset

    row = Row("billing", "orders", 0, 131, "east.orders", 120, "offset-syncs", "", "back")
    monkeypatch.setattr(translate_routes, "translate_back",
                        lambda flow, groups, regex, timeout: Translation([row], ["a note"]))
    applied: list[bool] = []

    def apply(flow: FlowConfig, rows: list[Row], execute: bool, timeout: float) -> dict[str, Any]:
        applied.append(execute)
        return {"billing": {TopicPartition("orders", 0): GroupOffset(99)}}

    monkeypatch.setattr(translate_routes, "apply", apply)
    app = create_app(FakeWorker())

    def send(method: str, path: str, **kwargs: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://mm2py") as client:
                return await client.request(method, path, **kwargs)

        return asyncio.run(go())

    plan = send("GET", "/flows/east/west/groups/billing/failback").json()
    assert plan["rows"][0]["source_offset"] == 131 and plan["notes"] == ["a note"] and not applied
    done = send("POST", "/flows/east/west/groups/billing/failback", json={"execute": True}).json()
    assert applied == [True] and done["executed"] and done["previous"] == {"orders-0": 99}
    r = send("GET", "/flows/east/west/groups/billing/failback?topic_regex=(")
    assert r.status_code == 400 and r.json()["key"] == "topic_regex"
