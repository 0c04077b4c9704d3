"""The test tree itself: pytest imports test files by basename (rootdir-relative, no packages), so two
files with the same name in different folders stop the whole run at collection. Caught here, in the
unit run, before an integration run of many minutes. And what tests share lives in tests/support/:
no test module imports another, and no helper sits beside the tests."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_has_its_own_basename() -> None:
    files = sorted(TESTS.rglob("test_*.py"))
    assert len(files) > 40, "the walk must see the test tree"
    counts = Counter(p.name for p in files)
    clashes = {name: [str(p.relative_to(TESTS)) for p in files if p.name == name]
               for name, n in counts.items() if n > 1}
    assert not clashes, f"test files sharing a basename (pytest cannot collect both): {clashes}"


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_no_test_module_imports_another_and_helpers_live_in_tests_support() -> None:
    files = sorted(TESTS.rglob("*.py"))
    test_modules = {p.stem for p in files if p.name.startswith("test_")}
    imports_a_test = {}
    for p in files:
        found = sorted(n for n in _imported(p) if set(n.split(".")) & test_modules)
        if found:
            imports_a_test[str(p.relative_to(TESTS))] = found
    assert not imports_a_test, f"test modules imported by others (share via tests/support): {imports_a_test}"
    stray = [str(p.relative_to(TESTS)) for p in files
             if not p.name.startswith("test_") and p.name not in ("conftest.py", "__init__.py")
             and p.parent != TESTS / "support"]
    assert not stray, f"helpers outside tests/support/: {stray}"
