"""The compiled per-batch path (:mod:`mm2py.protocol._native`), when it is built.

A mirror of small batches spends its time on work done once per source batch: walking the fetched
record set, checking each CRC, decompressing each records section, reading each record's framing
and writing it again for a merged batch. In Python that is about 10 us per batch even with the
array-based merge, which caps a mirror of half-KiB batches at one event-loop thread's worth of
them. ``_native`` (C, built by the project's install from ``_native.c``, ``_native_merge.c`` and
``_native_plan.c``, linked to liblz4) does that work for record sets and runs of batches, plus the
planning of runs, a fetch's record-age histogram and LZ4 frames.

It decides nothing on its own: each function is a stand-in for a Python path on the input it
accepts and answers ``None`` for anything else -- input the Python path would reject (so the
Python path raises its precise :class:`~mm2py.protocol.errors.CorruptBatchError`) and input it does
not handle (codecs other than none and LZ4). Without the extension (not built, or
``MM2PY_NATIVE=0`` in the environment) every call answers ``None`` and the Python paths do all
the work, with the same results. ``tests/unit/test_native.py`` checks both paths against each
other over random and corrupted input.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from types import ModuleType
from typing import TypeVar

__all__ = ["AVAILABLE", "batch_ages", "crc32c_carry", "crc32c_shift", "lz4_frame", "merge", "plan", "split",
           "unavailable"]

#: a RecordBatch (records.py imports this module)
B = TypeVar("B")


def _load() -> tuple[ModuleType | None, str | None]:
    if os.environ.get("MM2PY_NATIVE", "1") == "0":
        return None, "MM2PY_NATIVE=0 turns it off"
    try:
        from mm2py.protocol import _native
    except ImportError as exc:
        return None, f"it is not built ({exc})"
    return _native, None


_native, _off = _load()
#: the compiled path is in use
AVAILABLE = _native is not None


def unavailable() -> str | None:
    """Why the compiled path is not in use, and how to get it; None when it is."""
    if _off is None:
        return None
    return (f"the compiled hot path is off: {_off}; mirroring runs on the pure-Python path, with "
            "the same results but more CPU per batch (to build it: a C compiler and the headers of "
            "Python and liblz4, e.g. apt-get install gcc python3-dev liblz4-dev, then reinstall "
            "mm2py)")

#: ``split`` flags: a control batch / a transactional batch was seen / a batch does not start
#: after the previous one's last offset
CONTROL_SEEN = 1
TRANSACTIONAL_SEEN = 2
OUT_OF_ORDER = 4

#: ``merge`` step kinds (see ``_native_merge.c``)
PASS, PASS_OUT_OF_SEQUENCE, PASS_TIME_RANGE, MERGED = 0, 1, 2, 3


def split(view: memoryview, cls: type[B], verify: bool) -> tuple[list[B], int, int] | None:
    """``split_record_set(view)`` with every batch's CRC checked (``verify``), and flags
    (:data:`CONTROL_SEEN`, :data:`TRANSACTIONAL_SEEN`, :data:`OUT_OF_ORDER`); ``None``: take the
    Python path."""
    if _native is None:
        return None
    return _native.split(view, cls, verify)


def merge(run: list[B], verify: bool) -> tuple[list[tuple[int, ...]], int] | None:
    """The steps of merging ``run`` (see ``_native_merge.c``) and the number of decompressions;
    ``None``: take the Python path."""
    if _native is None:
        return None
    return _native.merge(run, verify)


def batch_ages(batches: list[B], now: float, bounds: tuple[float, ...]) -> tuple[list[int], float] | None:
    """The age histogram of ``batches`` fetched at ``now`` (see ``latency.observe_fetch``): counts
    per bucket of ``bounds`` and the sum of the ages; ``None``: take the Python path."""
    if _native is None:
        return None
    return _native.batch_ages(batches, now, bounds)


def crc32c_shift(value: int, n: int) -> int | None:
    """``crc.shift``: the raw CRC-32C register ``value`` after ``n`` zero bytes; ``None``: take the
    Python path."""
    if _native is None:
        return None
    return _native.crc32c_shift(value, n)


def crc32c_carry(crc: int, old: bytes | memoryview, new: bytes, tail: int) -> int | None:
    """``crc.carry_over`` in one call; ``None``: take the Python path."""
    if _native is None:
        return None
    return _native.crc32c_carry(crc, old, new, tail)


def lz4_frame(data: bytes | bytearray | memoryview) -> bytes | None:
    """``data`` as the LZ4 frame ``compression`` writes in LZ4's fast mode (the same bytes; the GIL
    released while compressing); ``None``: take the Python path."""
    if _native is None:
        return None
    return _native.lz4_frame(data)


def plan(
    batches: list[B], threshold: int, limit: int, cuts: Collection[int]
) -> list[tuple[int, int, int]] | None:
    """Coalesce's planning of one partition's ``batches``: ``(start, end, bytes)`` segments in
    order, a run to merge or a batch passed through (see ``_native_plan.c``); ``None``: take the
    Python path."""
    if _native is None:
        return None
    return _native.plan(batches, threshold, limit, cuts)
