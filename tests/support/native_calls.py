"""Which unit tests take a different path without the compiled extension.

``make test`` runs the unit suite twice: once as installed (the compiled per-batch path of
:mod:`mm2py.protocol.native` on), and once more with ``MM2PY_NATIVE=0`` for a user without it. A
test whose code never calls one of ``native``'s stand-ins runs the same code both times, so the
second pass takes only the tests marked ``native_path``. The mark is checked, not trusted:
:func:`install` counts every call of a stand-in, and :func:`check` fails a unit test that made one
without carrying the mark (the conftest runs it after each test of the first pass).

Code must reach the stand-ins as ``native.<name>`` (as it does): a name imported from the module
on its own would not be counted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mm2py.protocol import native

#: the functions that answer for the compiled path (``None``: take the Python path)
STAND_INS = tuple(name for name in native.__all__ if name not in ("AVAILABLE", "unavailable"))
MARK = "native_path"

#: calls of a stand-in since the run started (one counter: a test only asks whether it grew)
_calls = 0


def _counted(f: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        global _calls
        _calls += 1
        return f(*args, **kwargs)

    return call


def install() -> None:
    """Count the calls of every stand-in (once per process)."""
    for name in STAND_INS:
        f = getattr(native, name)
        if not hasattr(f, "__wrapped__"):
            setattr(native, name, _counted(f))


def calls() -> int:
    return _calls


def check(item: pytest.Item, before: int) -> None:
    """Fail a unit test that reached a stand-in (the count grew past ``before``) without the mark."""
    if _calls == before or "unit" not in Path(str(item.path)).parts:
        return
    if item.get_closest_marker(MARK) is None:
        pytest.fail(
            f"{item.nodeid} reached mm2py.protocol.native's compiled-path stand-ins, so it takes "
            f"another path with MM2PY_NATIVE=0: mark its module (pytestmark = pytest.mark.{MARK}) "
            "so that make test's pure-Python pass runs it too", pytrace=False)
