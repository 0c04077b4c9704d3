"""``GET /flows/{name}/translate`` (no broker: the flow's syncs and positions are given, the worker's
runners faked): both directions, a pair-shaped path, 400 for bad input and for offsets that do not
translate exactly, 404 for an unknown flow or partition, always the ``/flows`` API's error body; the
failback routes, and the list of groups a failback can move (503 for an unreachable target)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from mm2py.config.models import FlowConfig
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.operations.translator import FlowTranslator
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.mm2_records import OffsetSync
from mm2py.protocol.types import TopicPartition
from mm2py.rest_api.app import create_app
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
    from mm2py.operations.failover import Row, Translation
    from mm2py.rdkafka.admin import GroupOffset
    from mm2py.rest_api.flows import translate as translate_routes

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



def _get(app: Any, path: str) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://mm2py") as client:
            return await client.get(path)

    return asyncio.run(go())


def test_the_groups_a_failback_can_move(monkeypatch: pytest.MonkeyPatch) -> None:
    from mm2py.operations import failback
    from mm2py.rdkafka.admin import ClusterAdmin, GroupOffset

    # a target that refuses connections: the same 503 as the failback call (no broker involved)
    down = create_app(FakeWorker(**{"west.bootstrap.servers": "127.0.0.1:1", "admin.timeout.ms": "500"}))
    r = _get(down, "/flows/east/west/groups")
    assert r.status_code == 503 and "cluster 'west'" in r.json()["error"], r.text

    orders, orders1 = TopicPartition("east.orders", 0), TopicPartition("east.orders", 1)
    local, other = TopicPartition("local", 0), TopicPartition("x", 1)
    committed = {  # on the target: a mirrored topic, the target's own topic, a topic not mirrored
        "billing": {orders1: GroupOffset(3), orders: GroupOffset(7), local: GroupOffset(1)},
        "local-app": {local: GroupOffset(5)},
        "audit": {other: GroupOffset(2), orders: GroupOffset(1)},
    }
    asked: list[str] = []

    def group_offsets(admin: ClusterAdmin, groups: list[str]) -> dict[str, Any]:
        asked.append(admin.alias)
        return {g: committed[g] for g in groups}

    monkeypatch.setattr(ClusterAdmin, "list_groups", lambda admin: sorted(committed))
    monkeypatch.setattr(ClusterAdmin, "group_offsets", group_offsets)
    monkeypatch.setattr(failback, "read_positions", lambda flow, timeout: {  # what the pair mirrored
        TopicPartition("orders", 0): Position(16, 11), TopicPartition("orders", 1): Position(4, 4)})
    app = create_app(FakeWorker())
    r = _get(app, "/flows/east/west/groups")
    assert r.status_code == 200, r.text
    assert r.json() == {"flow": "east->west", "target_cluster": "west", "groups": [
        {"group": "audit", "partitions": ["east.orders-0"]},
        {"group": "billing", "partitions": ["east.orders-0", "east.orders-1"]},
    ]}
    assert asked == ["west"]  # the groups as committed on the target
    r = _get(app, "/flows/east/nowhere/groups")
    assert r.status_code == 400 and "no flow east->nowhere" in r.json()["error"], r.text
