"""Writes tests/INDEX.md: for each module of mm2py, the test files that reach it (import it, run it as a
command, call its HTTP routes, or use a tests/support helper that does), and for each helper in
tests/support, the test files that use it; and the modules no test reaches. Read from the source
alone (nothing runs; scripts/tests_reach.py reads commands and HTTP routes).

    python scripts/tests_index.py           rewrite tests/INDEX.md
    python scripts/tests_index.py --check   exit 1 if tests/INDEX.md is not what it would write

tests/unit/test_tests_index.py fails while the index is stale.
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
import tests_reach as reach  # noqa: E402  (scripts/tests_reach.py)

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


def _imports(tree: ast.AST, known: set[str], origins: dict[str, dict[str, str]]) -> set[str]:
    """The known modules ``tree`` imports: ``from a import b`` names ``a.b`` when that is a module,
    else ``a`` and the module that defines ``b`` (``a`` may only re-export it); and those it runs
    (``"-m", "mm2py.cli"`` in a command line)."""
    found: set[str] = set()
    for node in ast.walk(tree):
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


def _table(heading: str, intro: str, modules: Iterable[str], used_by: dict[str, dict[str, str]]) -> list[str]:
    lines = [f"## {heading}", "", intro, "", "| module | test files |", "| --- | --- |"]
    for module in modules:
        tests = ", ".join(f"[{t}]({t})" + (f" ({how})" if how else "")
                          for t, how in used_by.get(module, {}).items()) or "none"
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


class Reach:
    """What each file reaches: module -> how ("" for an import, a run by ``python -m`` or a name;
    else "via command", "via HTTP" or "via tests/support/<helper>.py")."""

    def __init__(self, modules: dict[str, Path], support: dict[str, Path],
                 executables: dict[str, str] | None = None) -> None:
        """``modules``: every module a test may reach (``support``'s among them); ``executables``:
        the installed scripts and the modules they enter by (pyproject.toml's)."""
        self.modules, self.support = modules, support
        self.known = set(modules)
        self.origins = _origins(modules)
        self.words = reach.commands(modules)
        self.executables = reach.scripts(ROOT / "pyproject.toml") if executables is None else executables
        self.routes = reach.routes(modules)
        self.rewrites = _rewrites(modules)
        self.done: dict[Path, dict[str, str]] = {}

    def of(self, path: Path) -> dict[str, str]:
        if path in self.done:
            return self.done[path]
        self.done[path] = {}  # a helper importing one that imports it back: no loop
        tree = ast.parse(path.read_text(), str(path))
        how = {m: "" for m in _imports(tree, self.known, self.origins)}
        how.update((m, "") for m in self.known if _named_after(m, path))
        for m in reach.entries_run(tree, self.known, self.executables):
            how.setdefault(m, "via command")
        for m in reach.routes_called(tree, self.routes, self.rewrites):
            how.setdefault(m, "via HTTP")
        for helper in sorted(m for m, h in how.items() if h == "" and m in self.support):
            for m in self.of(self.support[helper]):
                how.setdefault(m, f"via tests/support/{self.support[helper].name}")
        if "mm2py.cli" in how:
            for m in reach.words_run(tree, self.words, self.executables):
                how.setdefault(m, "via command")
        how.pop(next((m for m, p in self.support.items() if p == path), ""), None)
        self.done[path] = how
        return how


def _rewrites(modules: dict[str, Path]) -> dict[str, Callable[[str], str | None]]:
    """``/flows/east/west/...`` is routed as ``/flows/east->west/...`` (rest_api/flows/paths.py)."""
    if "mm2py.rest_api.flows.paths" not in modules:
        return {}
    from mm2py.rest_api.flows.paths import rewritten

    return {"mm2py.rest_api.flows.paths": rewritten}


def render() -> str:
    product = product_modules()
    support = {m: p for m, p in _modules(TESTS / "support", "tests.support").items() if m != "tests.support"}
    reaching = Reach({**product, **support}, support)
    used_by: dict[str, dict[str, str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        for module, how in sorted(reaching.of(path).items()):
            used_by.setdefault(module, {})[path.relative_to(TESTS).as_posix()] = how
    product = {m: p for m, p in product.items() if not _forwards_only(p)}
    untested = [f"- `{m}`" for m in product if m not in used_by] or ["None."]
    lines = [
        "# Where each module is tested",
        "",
        "Written by `python scripts/tests_index.py`: a test file is listed against the modules it reaches.",
        "Plain, it imports them (a name imported from a module that re-exports it counts for both), runs",
        "them by name (`python -m mm2py.cli`) or is named after them (`test_fetcher.py`,",
        "`test_fetcher_*.py`).",
        "Marked, it reaches them another way: *via command*, it runs the `mm2py` command (`python -m mm2py`,",
        "`python -m mm2py.cli`, the `mm2py` script, `main([...])` from `mm2py.cli`) with a command word",
        "(`run` is `mm2py.cli.run`, `flow-offsets` is `mm2py.cli.flow_offsets`), or the entries that",
        "command passes through; *via HTTP*, it requests a path that a route of `rest_api/` declares",
        "(`GET /flows/{name}/offsets`); *via tests/support/X.py*, a helper it imports reaches them (in",
        "any of these ways, helpers it imports included). A test that reaches a module only through",
        "another product module is not listed. Packages that only re-export are left out.",
        "`tests/unit/test_tests_index.py` fails when this file is stale. Unit tests are in `unit/` (no",
        "broker), integration tests in `integration/` (real Kafka brokers, started by `conftest.py`).",
        "",
        "## Not reached by any test",
        "",
        "The modules of mm2py that no test file reaches in any of the ways above.",
        "",
        *untested,
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
