"""MirrorTaskBuilder: the mirror task's module is imported once, in a worker thread (so the event
loop keeps serving the controller's first refresh while it loads), and every build uses it; the
flow's tasks are built on one set of shared clients, closed with the builder."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from mm2py.runtime import inprocess
from mm2py.runtime.inprocess import MirrorTaskBuilder


class Spec:
    def __init__(self, name: str) -> None:
        self.name = name
        self.flow = "flow"


class Clients:
    def __init__(self, flow: Any) -> None:
        self.flow = flow
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def test_the_task_module_is_imported_once_off_the_event_loop_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    imports: list[tuple[str, bool]] = []
    loop_thread: list[threading.Thread] = []

    async def build_task(spec: Any, *, commit_interval: float, clients: Any) -> tuple[Any, float, Any]:
        return spec, commit_interval, clients

    def import_module(name: str) -> SimpleNamespace:
        imports.append((name, threading.current_thread() is loop_thread[0]))
        return SimpleNamespace(build_task=build_task, FlowClients=Clients)

    monkeypatch.setattr(inprocess.importlib, "import_module", import_module)

    async def main() -> list[Any]:
        loop_thread.append(threading.current_thread())
        builder = MirrorTaskBuilder(0.5)
        builder.preload()
        builder.preload()
        built = [await builder(Spec("spec-1")), await builder(Spec("spec-2"))]  # type: ignore[arg-type]
        await builder.close()
        return built

    (s1, i1, c1), (s2, i2, c2) = asyncio.run(main())
    assert (s1.name, i1, s2.name, i2) == ("spec-1", 0.5, "spec-2", 0.5)
    assert c1 is c2 and c1.flow == "flow" and c1.closed  # one set of clients for the flow's tasks
    assert imports == [("mm2py.connectors.mirror_task", False)]


def test_a_build_without_preload_imports_the_module_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    imports: list[str] = []

    async def build_task(spec: Any, *, commit_interval: float, clients: Any) -> Any:
        return spec

    def import_module(name: str) -> SimpleNamespace:
        imports.append(name)
        return SimpleNamespace(build_task=build_task, FlowClients=Clients)

    monkeypatch.setattr(inprocess.importlib, "import_module", import_module)
    spec = Spec("spec")
    assert asyncio.run(MirrorTaskBuilder(1.0)(spec)) is spec  # type: ignore[arg-type]
    assert imports == ["mm2py.connectors.mirror_task"]
