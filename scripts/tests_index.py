"""Writes tests/INDEX.md: for each module of mm2py, the test files that import it, and for each
helper in tests/support, the test files that use it. Read from the imports alone (nothing runs).

    python scripts/tests_index.py           rewrite tests/INDEX.md
    python scripts/tests_index.py --check   exit 1 if tests/INDEX.md is not what it would write

tests/unit/test_tests_index.py fails while the index is stale.
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
sys.path.insert(0, str(ROOT))
from tests.support.rooms import product_modules  # noqa: E402  (the checkout's rooms: mm2py/, connectors/, rest_api/)

INDEX = TESTS / "INDEX.md"


def _modules(package: Path, prefix: str) -> dict[str, Path]:
    """The modules under ``package`` by dotted name (a package is its ``__init__``)."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join([prefix, *parts])] = path
    return dict(sorted(names.items()))


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str | None:
    """The dotted name an ``ImportFrom`` in ``module`` (at ``path``) imports from."""
    if node.level == 0:
        return node.module
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _origins(modules: dict[str, Path]) -> dict[str, dict[str, str]]:
    """For each module, the names it imports at its top level from another of ``modules``: where
    ``from mm2py.config.models import FlowConfig`` really comes from."""
    origins: dict[str, dict[str, str]] = {}
    for module, path in modules.items():
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ImportFrom):
                source = _absolute(module, path, node)
                if source in modules:
                    for a in node.names:
                        origins.setdefault(module, {})[a.asname or a.name] = source
    return origins


def _defined_in(module: str, name: str, origins: dict[str, dict[str, str]]) -> str:
    seen = set()
    while name in origins.get(module, {}) and module not in seen:
        seen.add(module)
        module = origins[module][name]
    return module


def _imports(path: Path, known: set[str], origins: dict[str, dict[str, str]]) -> set[str]:
    """The known modules ``path`` imports: ``from a import b`` names ``a.b`` when that is a module,
    else ``a`` and the module that defines ``b`` (``a`` may only re-export it); and those it runs
    (``"-m", "mm2py.cli"`` in a command line)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.List | ast.Tuple | ast.Call):  # ``[python, "-m", "mm2py.cli"]``
            items = node.args if isinstance(node, ast.Call) else node.elts
            found.update(b.value for a, b in itertools.pairwise(items)
                         if isinstance(a, ast.Constant) and a.value == "-m"
                         and isinstance(b, ast.Constant) and b.value in known)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if sub in known:
                    found.add(sub)
                elif node.module in known:
                    found.update({node.module, _defined_in(node.module, a.name, origins)})
    return found


def _table(heading: str, intro: str, modules: Iterable[str], used_by: dict[str, list[str]]) -> list[str]:
    lines = [f"## {heading}", "", intro, "", "| module | test files |", "| --- | --- |"]
    for module in modules:
        tests = ", ".join(f"[{t}]({t})" for t in used_by.get(module, [])) or "none"
        lines.append(f"| `{module}` | {tests} |")
    return [*lines, ""]


def _forwards_only(path: Path) -> bool:
    """A package ``__init__`` that defines nothing: a docstring, imports, ``__all__``."""
    body = ast.parse(path.read_text(), str(path)).body
    return path.name == "__init__.py" and all(
        isinstance(n, ast.Import | ast.ImportFrom)
        or (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
        or (isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == ["__all__"])
        for n in body)


def _named_after(module: str, test: Path) -> bool:
    """``test_fetcher.py`` and ``test_fetcher_*.py`` are named after ``...fetcher``."""
    leaf = module.rsplit(".", 1)[-1]
    return test.stem == f"test_{leaf}" or test.stem.startswith(f"test_{leaf}_")


def render() -> str:
    product = product_modules()
    support = {m: p for m, p in _modules(TESTS / "support", "tests.support").items() if m != "tests.support"}
    known = set(product) | set(support)
    origins = _origins({**product, **support})
    used_by: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        found = _imports(path, known, origins) | {m for m in known if _named_after(m, path)}
        for module in sorted(found):
            used_by.setdefault(module, []).append(path.relative_to(TESTS).as_posix())
    product = {m: p for m, p in product.items() if not _forwards_only(p)}
    lines = [
        "# Where each module is tested",
        "",
        "Written by `python scripts/tests_index.py`: a test file is listed against the modules it imports",
        "(a name imported from a module that re-exports it counts for both), the modules it runs by name",
        "(`python -m mm2py.cli`) and the modules it is named after (`test_fetcher.py`, `test_fetcher_*.py`);",
        "a test that reaches a module only through another module or a helper is not. Packages that only",
        "re-export are left out.",
        "`tests/unit/test_tests_index.py` fails when this file is stale. Unit tests are in `unit/` (no",
        "broker), integration tests in `integration/` (real Kafka brokers, started by `conftest.py`).",
        "",
        *_table("mm2py", "The product, module by module.", product, used_by),
        *_table("tests/support", "What the tests share: fakes, builders and local clusters of other systems.",
                support, used_by),
    ]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--check"]:
        if INDEX.exists() and INDEX.read_text() == text:
            return 0
        print("tests/INDEX.md is stale: run python scripts/tests_index.py", file=sys.stderr)
        return 1
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    INDEX.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
