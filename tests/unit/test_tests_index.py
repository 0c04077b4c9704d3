"""tests/INDEX.md (each mm2py module with the test files that import it, run it or are named after
it) is what scripts/tests_index.py writes from the tree as it is now."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("tests_index", ROOT / "scripts" / "tests_index.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_index_of_tests_by_module_is_fresh() -> None:
    expected = _script().render()
    assert (ROOT / "tests" / "INDEX.md").read_text() == expected, (
        "tests/INDEX.md is stale: run python scripts/tests_index.py")


def test_the_index_names_every_module_it_should() -> None:
    text = (ROOT / "tests" / "INDEX.md").read_text()
    assert "| `mm2py.client.fetcher` | " in text and "[unit/test_fetcher.py](unit/test_fetcher.py)" in text
    assert "| `tests.support.brokers` | " in text
    assert "| `mm2py.client` |" not in text  # a package that only re-exports
