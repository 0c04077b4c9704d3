"""The check behind the ``native_path`` mark (tests.support.native_calls): a unit test that calls a
stand-in of mm2py.protocol.native without the mark fails, one with the mark or with no call passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mm2py.protocol import native
from tests.support import native_calls

#: calls a stand-in on purpose
pytestmark = pytest.mark.native_path


class Item:
    """What ``check`` reads of a pytest item."""

    def __init__(self, path: str, marked: bool) -> None:
        self.path, self.nodeid, self.marked = Path(path), f"{path}::t", marked

    def get_closest_marker(self, name: str) -> Any:
        return object() if self.marked and name == native_calls.MARK else None


def check(path: str, marked: bool, calls: bool) -> None:
    before = native_calls.calls()
    if calls:
        native.crc32c_shift(1, 8)
    native_calls.check(Item(path, marked), before)  # type: ignore[arg-type]


def test_every_stand_in_is_counted() -> None:
    native_calls.install()
    assert native_calls.STAND_INS and "split" in native_calls.STAND_INS
    assert all(hasattr(getattr(native, name), "__wrapped__") for name in native_calls.STAND_INS)


def test_an_unmarked_unit_test_that_calls_a_stand_in_fails_with_what_to_do() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"pytestmark = pytest.mark.native_path"):
        check("tests/unit/test_x.py", marked=False, calls=True)


def test_a_marked_one_an_unmarked_one_without_calls_and_an_integration_test_pass() -> None:
    check("tests/unit/test_x.py", marked=True, calls=True)
    check("tests/unit/test_x.py", marked=False, calls=False)
    check("tests/integration/test_x.py", marked=False, calls=True)
