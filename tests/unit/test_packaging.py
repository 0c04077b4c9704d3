"""What the wheel holds, read from pyproject.toml's setuptools config (nothing is built): mm2py's
own packages and no test harness. The test harness (fakes, helpers, the local Connect worker, Spark
standalone cluster, identity provider and tiered storage of the tests) lives in tests/support/,
outside every installed package, and the product imports nothing of it."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]
#: what only the tests need: a product module importing one of these at import time would make
#: `pip install mm2py` (without the dev extra) fail to start
TEST_ONLY = {"tests", "pytest", "hypothesis", "selenium"}


def _installed_packages() -> list[str]:
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    return find_packages(where=str(ROOT / find.get("where", ["."])[0]),
                         include=find.get("include", ["*"]), exclude=find.get("exclude", []))


def test_the_wheel_holds_mm2py_alone_and_no_test_package() -> None:
    packages = _installed_packages()
    assert "mm2py" in packages and "mm2py.kafka_local" in packages, packages
    assert all(p == "mm2py" or p.startswith("mm2py.") for p in packages), packages
    # the harness is a package of its own, but not an installed one
    assert (ROOT / "tests" / "support" / "__init__.py").exists()


def test_no_product_module_imports_the_test_harness_or_a_test_only_dependency() -> None:
    found = []
    for path in sorted((ROOT / "mm2py").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [(str(path.relative_to(ROOT)), n) for n in names if n.split(".")[0] in TEST_ONLY]
    assert not found, f"product modules importing test-only code: {found}"
