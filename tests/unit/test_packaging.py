"""What the wheel holds, read from setup.py's layout (run with setuptools' setup() caught: nothing is
built): mm2py's
own packages and no test harness. The test harness (fakes, helpers, the local Connect worker, Spark
standalone cluster, identity provider and tiered storage of the tests) lives in tests/support/,
outside every installed package, and the product imports nothing of it."""

from __future__ import annotations

import ast
import runpy
from pathlib import Path
from typing import Any
from unittest import mock

from tests.support.rooms import product_modules

ROOT = Path(__file__).resolve().parents[2]
#: what only the tests need: a product module importing one of these at import time would make
#: `pip install mm2py` (without the dev extra) fail to start
TEST_ONLY = {"tests", "pytest", "hypothesis", "selenium"}


def _setup_arguments() -> dict[str, Any]:
    caught: dict[str, Any] = {}
    with mock.patch("setuptools.setup", lambda **kwargs: caught.update(kwargs)):
        runpy.run_path(str(ROOT / "setup.py"))
    return caught


def _installed_packages() -> list[str]:
    return list(_setup_arguments()["packages"])


def test_the_rooms_at_the_top_install_as_mm2py_subpackages() -> None:
    """connectors/ and rest_api/ (the design card's top level) become mm2py.connectors and
    mm2py.rest_api with every subpackage, and each installed package has its folder."""
    arguments = _setup_arguments()
    rooms = arguments["package_dir"]
    assert rooms == {"mm2py": "mm2py", "mm2py.connectors": "connectors", "mm2py.rest_api": "rest_api"}
    packages = set(arguments["packages"])
    assert {"mm2py.connectors", "mm2py.rest_api", "mm2py.rest_api.flows", "mm2py.rest_api.ui"} <= packages
    for package in packages:
        room = max((r for r in rooms if package == r or package.startswith(f"{r}.")), key=len)
        folder = ROOT / rooms[room] / package.removeprefix(room).lstrip(".").replace(".", "/")
        assert (folder / "__init__.py").exists(), package


def test_the_wheel_holds_mm2py_alone_and_no_test_package() -> None:
    packages = _installed_packages()
    assert "mm2py" in packages and "mm2py.kafka_local" in packages, packages
    assert all(p == "mm2py" or p.startswith("mm2py.") for p in packages), packages
    # the harness is a package of its own, but not an installed one
    assert (ROOT / "tests" / "support" / "__init__.py").exists()


def test_no_product_module_imports_the_test_harness_or_a_test_only_dependency() -> None:
    found = []
    for path in product_modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [(str(path.relative_to(ROOT)), n) for n in names if n.split(".")[0] in TEST_ONLY]
    assert not found, f"product modules importing test-only code: {found}"
