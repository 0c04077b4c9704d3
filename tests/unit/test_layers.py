"""Imports only point down: errors -> protocol -> client -> config -> rdkafka (the confluent-kafka
admin side) -> stores (the topic-backed stores) -> engine -> connectors
-> operations (one-off operations against the clusters) -> runtime (the worker) -> interfaces; inside
the REST API, what its parts share -> its parts (``flows``, ``connect``, ``ui``, ``security``, none
importing another) -> the app and its server -> the CLI. No import cycle between modules
(``TYPE_CHECKING`` imports included), no Kafka client library below ``mm2py.rdkafka``, no Spark module
importing the in-process runtime."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

from tests.support.rooms import ROOMS, product_modules

ROOT = Path(__file__).resolve().parents[2]

LAYERS = {
    "mm2py.errors": 0,
    "mm2py.interrupts": 0,  # the command's Ctrl-C policy: the standard library only
    "mm2py.retry": 0,  # the one back-off helper: pure, the standard library only
    "mm2py.protocol": 1,
    "mm2py.client": 2,
    "mm2py.config": 3,
    "mm2py.rdkafka": 4,  # the confluent-kafka admin side: admin client, its values, health, ACLs, log
    "mm2py.stores": 5,  # the topic-backed stores, on the admin client of mm2py.rdkafka
    "mm2py.engine": 6,
    "mm2py.connectors": 7,
    "mm2py.operations": 8,  # one-off operations against the clusters: translation, failover, audit...
    "mm2py.runtime": 9,  # the worker (its REST routes reset a stopped flow's positions: an operation)
    "mm2py.rest_api": 10,  # mm2py.rest_api.shared: what the API's parts share
    "mm2py.rest_api.flows": 11,
    "mm2py.rest_api.connect": 11,
    "mm2py.rest_api.ui": 11,
    "mm2py.rest_api.security": 11,
    "mm2py.rest_api.app": 12,
    "mm2py.rest_api.server": 12,
    "mm2py.cli": 13,  # the command line: a module per command (run, dev, offsets, flow_offsets, audit, demo)
    "mm2py.__main__": 14,  # python -m mm2py: the command line
    "mm2py.command": 14,  # the command's entry: the Ctrl-C policy, then the CLI's imports
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
    return list(product_modules().items())


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


def test_every_module_stands_in_a_layer() -> None:
    """Each module sits in a room of the stack (issue 48: rooms by role); only the package root and
    ``mm2py.kafka_local`` (the test and demo harness) stand beside it."""
    outside = [m for m, _ in _modules() if _layer(m) is None and m != "mm2py"
               and not m.startswith("mm2py.kafka_local")]
    assert not outside, f"modules in no layer (add them to a room and to LAYERS): {outside}"


def _imported_modules(module: str, path: Path) -> list[str]:
    """Every name an import statement may bind to a module, absolute: ``from a.b import c`` gives
    ``a.b.c`` and ``a.b``; relative imports are resolved against the module's package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):  # every import, TYPE_CHECKING ones included
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            names.extend(f"{base}.{a.name}" for a in node.names)
            names.append(base)
    return names


def _module_graph() -> dict[str, set[str]]:
    """Each production module and the production modules it imports (any import, anywhere)."""
    modules = {name for name, _ in _modules()}
    graph: dict[str, set[str]] = {}
    for name, path in _modules():
        deps = set()
        for imported in _imported_modules(name, path):
            # ``from pkg import obj`` names the package; keep the longest known prefix
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name and imported != "mm2py":
                deps.add(imported)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or not (each holds a cycle)."""
    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for dep in graph.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    reachable = {m: reach(m) for m in graph}
    groups = {
        frozenset({m} | {o for o in reachable[m] if m in reachable[o]}) for m in graph if m in reachable[m]
    }
    return sorted(sorted(g) for g in groups)


def test_no_import_cycles() -> None:
    cycles = _cycles(_module_graph())
    assert not cycles, f"modules importing each other (TYPE_CHECKING imports included): {cycles}"


def test_a_cycle_would_be_found() -> None:
    """The cycle check itself: the graph it walks has the edges the sources state."""
    graph = _module_graph()
    assert "mm2py.protocol.records" in graph["mm2py.protocol.batch_edit"]
    assert "mm2py.engine.task_contract" in graph["mm2py.engine.task"]
    assert "mm2py.kafka_local.jars" in graph["mm2py.kafka_local.cluster"]  # relative import
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_kafka_client_libraries_only_in_rdkafka_and_above() -> None:
    for module, path in _modules():
        level = _layer(module)
        if level is not None and level < LAYERS["mm2py.rdkafka"]:
            bad = [n for n in _imports(path) if n.split(".")[0] == "confluent_kafka"]
            assert not bad, f"{module} imports {bad}"
    engine = [m for m, p in _modules() if m.startswith("mm2py.engine")
              and any(n.split(".")[0] == "confluent_kafka" for n in _imports(p))]
    assert not engine, f"engine modules import confluent_kafka: {engine}"


def _confluent_names(path: Path) -> set[str]:
    """The names a module imports from confluent_kafka (``from confluent_kafka import Consumer``)."""
    return {a.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == "confluent_kafka" for a in node.names}


def test_rdkafka_is_the_admin_side_and_stores_the_topic_backed_stores() -> None:
    """Issue 48: ``mm2py.rdkafka`` is the admin side, ``mm2py.stores`` the stores built on it. No
    rdkafka module imports a store, nor confluent-kafka's Consumer or Producer (it reads and writes
    no store topic); every store module reads or writes its topic through one of them."""
    rdkafka = _package_modules(ROOT / "mm2py" / "rdkafka")
    stores = [(m, p) for m, p in _package_modules(ROOT / "mm2py" / "stores") if p.name != "__init__.py"]
    assert {m.rpartition(".")[2] for m, _ in rdkafka} >= {
        "admin", "admin_settings", "admin_types", "cluster_health", "reachability", "acls", "log"}
    assert len(stores) >= 5, stores
    clients = {"Consumer", "Producer"}
    upward = {m: names for m, p in rdkafka if (names := sorted(
        n for n in _imported_modules(m, p) if n.split(".")[:2] == ["mm2py", "stores"]))}
    assert not upward, f"rdkafka modules import the stores: {upward}"
    store_clients = {m: names for m, p in rdkafka if (names := sorted(_confluent_names(p) & clients))}
    assert not store_clients, f"rdkafka modules import a store topic's client: {store_clients}"
    bare = [m for m, p in stores if not _confluent_names(p) & clients]
    assert not bare, f"stores modules that read or write no topic (move them to mm2py.rdkafka?): {bare}"



def test_protocol_layer_does_no_io() -> None:
    """The sans-IO layers (``mm2py.errors`` and ``mm2py.protocol``) import nothing that does I/O."""
    checked = []
    for module, path in _modules():
        layer = _layer(module)
        if layer is not None and layer <= LAYERS["mm2py.protocol"]:
            checked.append(module)
            bad = {n.split(".")[0] for n in _imports(path)} & {"socket", "asyncio", "selectors", "ssl"}
            assert not bad, f"{module} imports {bad}"
    assert "mm2py.protocol.records" in checked and "mm2py.errors" in checked, checked


def test_a_task_spec_is_plain_picklable_data() -> None:
    from mm2py.config.models import MirrorMakerConfig
    from mm2py.engine.task_contract import TaskSpec
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


def _package_modules(folder: Path) -> list[tuple[str, Path]]:
    return [(m, p) for m, p in product_modules().items() if p.is_relative_to(folder)]


#: the REST API's parts by role: each stands on what they share, none on another
REST_PARTS = ("mm2py.rest_api.flows", "mm2py.rest_api.connect", "mm2py.rest_api.ui",
              "mm2py.rest_api.security")


def test_the_rest_apis_parts_do_not_import_one_another() -> None:
    modules = _package_modules(ROOT / "rest_api")
    parts = {part: [(m, p) for m, p in modules if m == part or m.startswith(f"{part}.")]
             for part in REST_PARTS}
    assert all(len(found) >= 3 for found in parts.values()), parts
    imports = {m: sorted(n for n in _imported_modules(m, p)
                         if any(n == o or n.startswith(f"{o}.") for o in REST_PARTS if o != part))
               for part, found in parts.items() for m, p in found}
    bad = {m: names for m, names in imports.items() if names}
    assert not bad, f"a part of the REST API imports another: {bad}"


def test_spark_runtime_does_not_import_the_inprocess_runtime() -> None:
    spark = _package_modules(ROOT / "mm2py" / "runtime" / "spark")
    assert len(spark) >= 12, spark  # driver (7), executor (3), lease messages, the packages
    inprocess = "mm2py.runtime.inprocess"
    bad = {m: sorted(n for n in _imported_modules(m, p) if n == inprocess or n.startswith(f"{inprocess}."))
           for m, p in spark}
    assert not any(bad.values()), f"Spark modules import the in-process runtime: {bad}"


def test_spark_executor_modules_import_no_driver_module_and_no_pyspark() -> None:
    executor = _package_modules(ROOT / "mm2py" / "runtime" / "spark" / "executor")
    assert len(executor) >= 3, executor
    driver = "mm2py.runtime.spark.driver"
    bad = {m: sorted(n for n in _imported_modules(m, p)
                     if n == driver or n.startswith(f"{driver}.") or n.split(".")[0] == "pyspark")
           for m, p in executor}
    assert not any(bad.values()), f"executor modules import the driver's side or pyspark: {bad}"


def test_the_design_cards_rooms_stand_at_the_top_and_install_into_mm2py() -> None:
    """Issue 48: ``connectors/`` and ``rest_api/`` are top-level folders of the checkout, and setup.py
    maps them into the one installed package (``package_dir``), as this suite's walk does."""
    assert {p.name for p in ROOT.iterdir()} >= {
        "pyproject.toml", "mm2py", "connectors", "rest_api", "tests", "examples", "docker-compose.yml",
        "README.md"}
    assert not (ROOT / "mm2py" / "connectors").exists() and not (ROOT / "mm2py" / "rest_api").exists()
    tree = ast.parse((ROOT / "setup.py").read_text())
    (rooms,) = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                and [getattr(t, "id", None) for t in n.targets] == ["ROOMS"]]
    assert {k: ROOT / v for k, v in ast.literal_eval(rooms).items()} == ROOMS
    import mm2py.connectors
    import mm2py.rest_api

    assert Path(mm2py.connectors.__file__).resolve().parent == ROOT / "connectors"
    assert Path(mm2py.rest_api.__file__).resolve().parent == ROOT / "rest_api"
