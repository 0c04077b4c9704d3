"""Imports only point down: protocol -> client -> engine -> connectors -> runtime -> interfaces."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS = {
    "mm2py.protocol": 0,
    "mm2py.client": 1,
    "mm2py.engine": 2,
    "connectors": 3,
    "mm2py.runtime": 4,
    "rest_api": 5,
    "mm2py.cli": 5,
    "mm2py.demo": 5,
    "mm2py.failover": 5,
}


def _layer(module: str) -> int | None:
    best = None
    for prefix, level in LAYERS.items():
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best[0])
        ):
            best = (prefix, level)
    return None if best is None else best[1]


def _modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in ("mm2py", "connectors", "rest_api"):
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            out.append((".".join(rel.parts).removesuffix(".__init__"), path))
    return out


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("module,path", _modules(), ids=lambda v: str(v))
def test_imports_only_point_down(module: str, path: Path) -> None:
    own = _layer(module)
    if own is None:
        return  # mm2py.kafka_local (test/demo harness) and package roots stand outside the stack
    upward = [name for name in _imports(path) if (_layer(name) or -1) > own]
    assert not upward, f"{module} (layer {own}) imports higher layers: {upward}"


def test_protocol_layer_does_no_io() -> None:
    for module, path in _modules():
        if _layer(module) == 0:
            bad = {n.split(".")[0] for n in _imports(path)} & {"socket", "asyncio", "selectors", "ssl"}
            assert not bad, f"{module} imports {bad}"


def test_a_task_spec_is_plain_picklable_data() -> None:
    from mm2py.engine.config import MirrorMakerConfig
    from mm2py.engine.task_api import TaskSpec
    from mm2py.protocol.types import TopicPartition

    config = MirrorMakerConfig.from_mapping({
        "clusters": {"east": "127.0.0.1:1", "west": "127.0.0.1:2"},
        "flows": {"east->west": {"topics": "orders.*", "tasks.max": 3}},
    })
    tp = TopicPartition("orders", 0)
    spec = TaskSpec(config.enabled_flows()[0], 2, (tp,), {tp: 7})
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec
    assert again.flow.replication_policy().format_remote_topic("east", "orders") == "east.orders"
