"""A flow's change as a typed patch (``mm2py/config/patch.py``): applied to the typed flow it gives
the flow that layering the same MM2 keys over the configuration gives (client overrides and ignored
keys included), errors name the same keys, the change is read off typed values, and forgetting
run-time settings falls back to the file's (runners faked: no broker needed)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from mm2py.config.errors import ConfigError
from mm2py.config.models import MirrorMakerConfig
from mm2py.config.patch import FlowPatch, Forget, changed_settings
from mm2py.runtime.steering import flow_keys, layered
from tests.support.fake_flows import BASE, FakeWorker

FILE = {**BASE, "east->west.enabled": "true", "east->west.topics": "file.*", "consumer.client.rack": "r1"}


def test_a_patch_gives_the_flow_layering_its_keys_gives_and_says_what_changed() -> None:
    config = MirrorMakerConfig.from_flat(FILE)
    old = config.flows["east->west"]
    values: dict[str, Any] = {
        "topics": ["b.*", "c"], "tasks.max": 3, "emit.checkpoints.enabled": False,
        "consumer.fetch.min.bytes": 5, "source.admin.request.timeout.ms": "9",
        "target.cluster.security.protocol": "PLAINTEXT", "offset.storage.topic": "ignored",
    }
    patched = old.patched(FlowPatch(values=values).text("east->west"))
    assert patched == layered(FILE, flow_keys("east->west", values)).flows["east->west"]
    assert patched.client_overrides["consumer"] == {"client.rack": "r1", "fetch.min.bytes": "5"}
    assert changed_settings(old, patched) == {"topics", "tasks.max", "emit.checkpoints.enabled",
                                              "client_overrides"}
    assert changed_settings(old, old.patched({"topics": "file.*", "enabled": "false"})) == frozenset()


@pytest.mark.parametrize("values", [{"topcs": "a"}, {"tasks.max": "many"}, {"topics": "orders(["},
                                    {"source.cluster.linger.ms": "5"}, {"topics": {"nested": 1}}])
def test_a_bad_value_or_key_is_named_as_layering_names_it(values: dict[str, Any]) -> None:
    old = MirrorMakerConfig.from_flat(FILE).flows["east->west"]
    with pytest.raises(ConfigError) as layering:
        layered(FILE, flow_keys("east->west", values))
    with pytest.raises(ConfigError) as patching:
        old.patched(FlowPatch(values=values).text("east->west"))
    assert (str(patching.value), patching.value.key) == (str(layering.value), layering.value.key)
    assert patching.value.key is not None and patching.value.key.startswith("east->west.")


def test_forgotten_run_time_settings_fall_back_to_the_files_and_the_worker_config_stays_layered(
        tmp_path: Path) -> None:
    state = tmp_path / "state.json"

    async def run() -> None:
        file = {"east->west.enabled": "true", "east->west.topics": "file.*"}
        worker = FakeWorker(state, **file)
        await worker.start()
        first = await worker.update_flow("east->west", FlowPatch(values={"topics": "rt", "tasks.max": 3,
                                                                         "consumer.client.rack": "r2"}))
        assert (first.flow.topics, first.flow.tasks_max) == (("rt",), 3)
        replace = FlowPatch(values={"refresh.topics.enabled": False}, forget=Forget(all_but=frozenset()))
        second = await worker.update_flow("east->west", replace)
        assert (second.flow.topics, second.flow.tasks_max) == (("file.*",), 2)  # the file's, BASE's
        assert second.flow.client_overrides == {} and not second.flow.refresh_topics_enabled
        assert worker.overlay == {"east->west.refresh.topics.enabled": "false"}
        for flow in (worker.config.flows["east->west"], FakeWorker(state, **file).flows["east->west"].flow):
            assert flow == second.flow  # as a restart reads it back
        assert worker.config == layered(worker.base_keys, worker.overlay).model_copy(
            update={"source_keys": worker.config.source_keys})

    asyncio.run(run())


def test_enabled_is_refused_over_http_and_nothing_changes(tmp_path: Path) -> None:
    """``enabled`` in a ``PATCH`` or ``POST /flows`` body is refused: stored, a ``false`` would leave
    the flow running now and not start it after the next restart (pause, stop and DELETE do that)."""
    import httpx

    from mm2py.rest_api.app import create_app

    async def run() -> list[httpx.Response]:
        worker = FakeWorker(tmp_path / "state.json", **{"east->west.enabled": "true",
                                                       "east->west.topics": "payments"})
        await worker.start()
        transport = httpx.ASGITransport(app=create_app(worker), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://mm2py") as client:
            answers = [await client.patch("/flows/east->west", json={"settings": {"enabled": False}}),
                       await client.post("/flows", json={"source": "west", "target": "east",
                                                         "settings": {"enabled": "false"}})]
            answers.append(await client.get("/flows/east->west"))
        return answers

    patch, post, status = asyncio.run(run())
    for answer in (patch, post):
        assert answer.status_code in (400, 422), answer.text
        assert "'enabled' is not a setting to change here" in answer.text and "/pause" in answer.text
    assert status.json()["state"] == "RUNNING"
    state = tmp_path / "state.json"
    assert not state.exists() or "false" not in state.read_text()
