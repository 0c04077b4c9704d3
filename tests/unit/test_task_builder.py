"""MirrorTaskBuilder: the mirror task's module is imported once, in a worker thread (so the event
loop keeps serving the controller's first refresh while it loads), and every build uses it."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from mm2py.runtime import inprocess
from mm2py.runtime.inprocess import MirrorTaskBuilder


def test_the_task_module_is_imported_once_off_the_event_loop_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    imports: list[tuple[str, bool]] = []
    loop_thread: list[threading.Thread] = []

    async def build_task(spec: Any, *, commit_interval: float) -> tuple[Any, float]:
        return spec, commit_interval

    def import_module(name: str) -> SimpleNamespace:
        imports.append((name, threading.current_thread() is loop_thread[0]))
        return SimpleNamespace(build_task=build_task)

    monkeypatch.setattr(inprocess.importlib, "import_module", import_module)

    async def main() -> list[Any]:
        loop_thread.append(threading.current_thread())
        builder = MirrorTaskBuilder(0.5)
        builder.preload()
        builder.preload()
        return [await builder("spec-1"), await builder("spec-2")]  # type: ignore[arg-type]

    assert asyncio.run(main()) == [("spec-1", 0.5), ("spec-2", 0.5)]
    assert imports == [("connectors.mirror_task", False)]


def test_a_build_without_preload_imports_the_module_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    imports: list[str] = []

    async def build_task(spec: Any, *, commit_interval: float) -> Any:
        return spec

    def import_module(name: str) -> SimpleNamespace:
        imports.append(name)
        return SimpleNamespace(build_task=build_task)

    monkeypatch.setattr(inprocess.importlib, "import_module", import_module)
    assert asyncio.run(MirrorTaskBuilder(1.0)("spec")) == "spec"  # type: ignore[arg-type]
    assert imports == ["connectors.mirror_task"]
