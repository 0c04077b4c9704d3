"""A CRC-32C carried over a header edit (mm2py/protocol/crc.py) is the CRC computed from the bytes,
on the compiled path and on the Python reference, for any header and any length of what follows."""

from __future__ import annotations

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from mm2py.protocol import crc, native

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path

crc._shift_python(1, (1 << 41) - 1)  # the Python path's tables, built once when first used


@given(st.binary(min_size=40, max_size=40), st.binary(min_size=40, max_size=40),
       st.binary(max_size=5000))
def test_a_carried_over_crc_is_the_crc_of_the_new_bytes(old: bytes, new: bytes, tail: bytes) -> None:
    assert crc.carry_over(crc32c(old + tail), old, new, len(tail)) == crc32c(new + tail)


@given(st.integers(0, 2**32 - 1), st.integers(0, 1 << 40))
def test_the_python_shift_is_the_compiled_one(value: int, n: int) -> None:
    reference = crc._shift_python(value, n)
    assert native.crc32c_shift(value, n) in (None, reference)  # None: the extension is off


@given(st.integers(0, 2**32 - 1), st.integers(0, 3000))
def test_a_shift_is_the_register_after_as_many_zero_bytes(value: int, n: int) -> None:
    """Fed n zero bytes from the register ``value`` (the CRC library's chaining: its inversions
    undone), the register is ``shift(value, n)``."""
    register = crc32c(bytes(n), value ^ 0xFFFFFFFF) ^ 0xFFFFFFFF
    assert crc.shift(value, n) == crc._shift_python(value, n) == register


def test_carried_over_on_the_python_path_too() -> None:
    saved = native._native
    native._native = None
    try:
        old, new, tail = bytes(range(40)), bytes(range(1, 41)), b"records" * 999
        assert crc.carry_over(crc32c(old + tail), old, new, len(tail)) == crc32c(new + tail)
        assert crc.carry_over(7, old, old, len(tail)) == 7  # nothing changed, nothing to carry
    finally:
        native._native = saved
