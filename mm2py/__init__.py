"""mm2py: a MirrorMaker 2 port that mirrors raw Kafka RecordBatch bytes.

The design card's rooms ``connectors/`` and ``rest_api/`` stand at the top of a source checkout,
beside this folder; an install maps them into this package as ``mm2py.connectors`` and
``mm2py.rest_api`` (setup.py's ``package_dir``; a wheel copies them in). Invariant: when this package
is imported from a checkout (``PYTHONPATH`` on it, a Spark executor's path), its rooms come from the
same checkout, even where an editable install of another checkout is on the machine.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

__version__ = "0.1.0"

_HERE = Path(__file__).resolve().parent
_ROOMS = {f"{__name__}.{room}": _HERE.parent / room for room in ("connectors", "rest_api")}


class _CheckoutRooms:
    """Finds ``mm2py.connectors`` and ``mm2py.rest_api`` in the checkout this package came from."""

    @staticmethod
    def find_spec(
        fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        folder = _ROOMS.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


# a checkout: the rooms are not inside this folder (an installed copy has them there) but beside it
if not any((_HERE / room.rpartition(".")[2]).exists() for room in _ROOMS) and all(
    (folder / "__init__.py").exists() for folder in _ROOMS.values()
):
    sys.meta_path.insert(0, _CheckoutRooms())
