"""The product's rooms in the checkout: ``mm2py/``, and the design card's ``connectors/`` and
``rest_api/`` at the top beside it, installed as ``mm2py.connectors`` and ``mm2py.rest_api``
(``setup.py``'s ``package_dir``: tests/unit/test_layers.py checks that the two agree)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: package -> its folder in the checkout (a subpackage lives in its parent's folder)
ROOMS: dict[str, Path] = {
    "mm2py": ROOT / "mm2py",
    "mm2py.connectors": ROOT / "connectors",
    "mm2py.rest_api": ROOT / "rest_api",
}


def product_modules() -> dict[str, Path]:
    """Every module of the product by dotted name (a package is its ``__init__``), sorted."""
    names: dict[str, Path] = {}
    for package, folder in ROOMS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            names[".".join([package, *parts])] = path
    return dict(sorted(names.items()))
