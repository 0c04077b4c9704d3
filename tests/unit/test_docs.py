"""docs/architecture.md names every production module in its layer table (and no module that is gone)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("mm2py", "connectors", "rest_api")  # tests/support/rooms.py


def _layer_table() -> dict[str, set[str]]:
    """The table under "## Layers": each folder (``mm2py/runtime/``) and the file names its row names."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = re.match(r"\| `([\w/]+/)` \|(.*)\|\s*$", line)
        if match:
            rows.setdefault(match.group(1), set()).update(re.findall(r"`(\w+\.py)`", match.group(2)))
    return rows


def _modules() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if p.name != "__init__.py"}


def test_the_table_is_read() -> None:
    rows = _layer_table()
    assert "task.py" in rows["mm2py/engine/"] and "app.py" in rows["rest_api/"]


def test_every_production_module_is_in_the_architecture_layer_table() -> None:
    rows = _layer_table()
    missing = sorted(
        m for m in _modules() if m.rsplit("/", 1)[1] not in rows.get(m.rsplit("/", 1)[0] + "/", set())
    )
    assert not missing, f"add these modules to the layer table of docs/architecture.md: {missing}"


def test_the_layer_table_names_no_module_that_does_not_exist() -> None:
    listed = {folder + name for folder, names in _layer_table().items() for name in names}
    gone = sorted(listed - _modules())
    assert not gone, f"docs/architecture.md's layer table names modules that do not exist: {gone}"
