"""The compiled per-batch path (mm2py.protocol._native) gives exactly what the Python paths give:
the same batches and the same errors for a fetched record set, the same coalesced batches, counters
and errors for a partition's batches -- over random, out-of-sequence, far-apart and corrupted input.
The install builds the extension, so these tests fail (not skip) when it is missing; only the
run that turns the compiled path off on purpose (``MM2PY_NATIVE=0``: ``make test``'s second unit
run, the configuration of a user without the extension) skips them, as there is nothing to compare."""

from __future__ import annotations

import itertools
import math
import os
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import crc32c as crc32c_lib
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mm2py.engine.latency import LATENCY_BUCKETS, PartitionTimes, observe_fetch
from mm2py.protocol import coalesce as coalesce_module
from mm2py.protocol import compression, native
from mm2py.protocol.coalesce import DEFAULT_THRESHOLD, CoalesceCounters, coalesce
from mm2py.protocol.compression import Codec, CodecCounters
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.record_codec import Record, build_batch
from mm2py.protocol.records import HEADER_STRUCT, RecordBatch, split_checked, split_record_set
from mm2py.protocol.types import TopicPartition
from tests.support.batch_specs import BASE_TS, Spec, build, sizes_st, small_spec_st, spec_st
from tests.support.hypothesis_examples import examples

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path

if os.environ.get("MM2PY_NATIVE") == "0":
    pytest.skip("MM2PY_NATIVE=0: the pure-Python path alone, nothing to compare it with",
                allow_module_level=True)


@contextmanager
def python_path() -> Iterator[None]:
    """The Python paths only, as without the extension."""
    saved = native._native, native.AVAILABLE
    native._native, native.AVAILABLE = None, False
    try:
        yield
    finally:
        native._native, native.AVAILABLE = saved


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except (ProtocolError, ValueError) as exc:
        return type(exc).__name__, str(exc)


def test_the_compiled_path_is_built_and_in_use() -> None:
    assert native.AVAILABLE, (
        "mm2py.protocol._native is not built: scripts/install.sh builds it (C compiler, liblz4-dev)"
    )
    batches = build([Spec(0, "plain", Codec.LZ4, (50, 60), 0, -1)] * 3)
    before = CoalesceCounters.snapshot()
    assert native.merge(list(batches), True) is not None
    (out,) = coalesce(batches, max_bytes=1 << 20)
    assert out.sources == 3 and CoalesceCounters.snapshot()[0] == before[0] + 1


@given(st.binary(max_size=300))
def test_crc32c_is_castagnoli(data: bytes) -> None:
    assert native._native is not None
    assert native._native.crc32c(data) == crc32c_lib.crc32c(data)


def _corrupt(data: bytearray, flips: list[tuple[int, int]], reseal: bool) -> None:
    """Flip bytes; with ``reseal`` the CRC of the (single) batch is made right again, so what is
    wrong is past the CRC check: attributes, counts, the records section."""
    for pos, x in flips:
        if data:
            data[pos % len(data)] ^= x
    if reseal and len(data) >= 61:
        struct.pack_into(">I", data, 17, crc32c_lib.crc32c(bytes(data[21:])))


def _python_split(data: bytes) -> tuple[list[tuple[bytes, tuple[int, ...]]], int, int]:
    batches, trailing = split_record_set(data)
    for b in batches:
        b.verify()
    flags = native.CONTROL_SEEN * any(b.is_control for b in batches)
    flags |= native.TRANSACTIONAL_SEEN * any(b.is_transactional for b in batches)
    flags |= native.OUT_OF_ORDER * any(b.base_offset <= a.last_offset for a, b in itertools.pairwise(batches))
    return [(bytes(b.buf), b.fields) for b in batches], trailing, flags


@settings(max_examples=examples(400), deadline=None)
@given(
    specs=st.lists(spec_st, max_size=6),
    order=st.permutations(range(6)),
    cut=st.integers(0, 80),
    flips=st.lists(st.tuples(st.integers(0, 10**5), st.integers(1, 255)), max_size=3),
    reseal=st.booleans(),
)
def test_split_is_the_python_split_with_every_crc_checked_or_refuses(
    specs: list[Spec], order: list[int], cut: int, flips: list[tuple[int, int]], reseal: bool
) -> None:
    batches = build(specs)
    parts = [bytes(batches[i].buf) for i in order if i < len(batches)]  # out of order sometimes
    data = bytearray(b"".join(parts))
    del data[max(0, len(data) - cut):]
    _corrupt(data, flips, reseal and len(parts) == 1)
    expected = outcome(lambda: _python_split(bytes(data)))
    got = split_checked(bytes(data))
    if expected[0] != "ok":
        assert got is None, "the compiled path accepted what the Python path rejects"
        return
    assert got is not None, "the compiled path refused a record set the Python path accepts"
    batches_got, trailing, flags = got
    assert ([(bytes(b.buf), b.fields) for b in batches_got], trailing, flags) == expected[1]


def _build_mixed(specs: list[Spec], odd: list[int]) -> list[RecordBatch]:
    """``build`` plus batches whose records' offset deltas run backwards (merge-eligible by their
    header, but they cannot keep their offsets in a merge) at the positions ``odd``."""
    out = build(specs)
    for at in odd:
        if not out or at >= len(out):
            continue
        b = out[at]
        n = b.records_count
        if n < 2 or b.is_control or b.is_transactional or b.timestamp_type or not b.is_contiguous():
            continue
        recs = [Record(n - 1 - d, d * 3, b"k%d" % d, b"v" * (d + 5), ()) for d in range(n)]
        data = build_batch(recs, codec=b.codec, base_offset=b.base_offset, base_timestamp=b.base_timestamp)
        out[at] = RecordBatch(data)
    return out


far_ts_st = st.sampled_from([-(2**62), 2**62, 2**62 + 2**61, -(2**62) - 2**61])


@settings(max_examples=examples(300), deadline=None)
@given(
    specs=st.lists(
        st.one_of(small_spec_st, small_spec_st, small_spec_st,
                  st.builds(lambda s, t: replace(s, ts=t - BASE_TS), small_spec_st, far_ts_st)),
        min_size=1, max_size=30,
    ),
    odd=st.lists(st.integers(0, 29), max_size=3),
    sizes=sizes_st,
    max_bytes=st.sampled_from([700, 3000, 1 << 20]),
    verified=st.booleans(),
    damage=st.one_of(
        st.none(),
        st.tuples(st.integers(0, 29), st.lists(st.tuples(st.integers(0, 10**4), st.integers(1, 255)),
                                                min_size=1, max_size=2), st.booleans()),
        st.tuples(st.integers(0, 29), st.sampled_from(["fewer", "junk"]), st.just(True)),
    ),
    cut_at=st.lists(st.integers(0, 29), max_size=4),
    fetched=st.booleans(),
)
def test_coalesce_gives_the_same_batches_counters_and_errors_with_the_compiled_path(
    specs: list[Spec], odd: list[int], sizes: tuple[int, int], max_bytes: int, verified: bool,
    damage: tuple[int, list[tuple[int, int]] | str, bool] | None, cut_at: list[int], fetched: bool,
) -> None:
    batches = _build_mixed(specs, odd)
    if damage is not None:
        at, how, reseal = damage
        at %= len(batches)
        data = bytearray(batches[at].buf)
        if how == "fewer":  # one record more in the section than the header declares
            last_delta, count = struct.unpack_from(">i", data, 23)[0], struct.unpack_from(">i", data, 57)[0]
            struct.pack_into(">i", data, 23, last_delta - 1)
            struct.pack_into(">i", data, 57, count - 1)
            _corrupt(data, [], True)
        elif how == "junk":  # bytes after the records section's end (after an LZ4 frame's end mark)
            data += b"\x01\x02\x03"
            struct.pack_into(">i", data, 8, len(data) - 12)
            _corrupt(data, [], True)
        else:
            assert isinstance(how, list)
            _corrupt(data, [(61 + p % max(1, len(data) - 61), x) for p, x in how], reseal)
        batches[at] = RecordBatch(bytes(data))
        verified = verified and reseal  # the fetcher's check would have caught a bad CRC
    threshold, target = sizes
    # exact re-send cuts: runs end after these batches' last offsets (and one that is no batch's)
    cuts = frozenset(batches[i % len(batches)].last_offset for i in cut_at) | {-7}
    if fetched:  # views as the compiled split builds them: no header tuple until one is read
        split = native.split(memoryview(b"".join(bytes(b.buf) for b in batches)), RecordBatch, False)
        assert split is not None and len(split[0]) == len(batches)
        batches = split[0]

    def run() -> tuple[tuple[str, Any], tuple[int, ...], int]:
        c0, d0 = CoalesceCounters.snapshot(), CodecCounters.decompressions
        got = outcome(lambda: [
            (bytes(c.batch.buf), c.first_offset, c.last_offset, c.sources, c.index)
            for c in coalesce(batches, max_bytes=max_bytes, threshold=threshold, target=target,
                              verified=verified, cuts=cuts)
        ])
        c1 = CoalesceCounters.snapshot()
        return got, tuple(b - a for a, b in zip(c0, c1, strict=True)), CodecCounters.decompressions - d0

    compiled = run()
    with python_path():
        python = run()
    if python[0][0] == "ok":
        assert compiled == python
    else:  # failed: same error; counters may differ by the work done before it was found
        assert compiled[0] == python[0]


def _with_max_timestamp(ts: int) -> RecordBatch:
    header = (0, 49, 0, 2, 0, 0, 0, ts, ts, -1, -1, -1, 1)
    return RecordBatch._trusted(memoryview(HEADER_STRUCT.pack(*header)), header)


@settings(max_examples=examples(300), deadline=None)
@given(
    now=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    stamps=st.lists(st.one_of(
        st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),  # anything the header holds
        st.integers(min_value=-5, max_value=10),
        st.integers(min_value=0, max_value=4_000_000_000_000),  # around now, past and future
    ), max_size=60),
    back=st.lists(st.sampled_from([*LATENCY_BUCKETS, 0.0, 1e-4, 400.0]), max_size=10),
)
def test_batch_ages_are_observe_fetchs_histogram(now: float, stamps: list[int], back: list[float]) -> None:
    # ages exactly on a bucket's bound too: a timestamp `bound` seconds before now
    stamps = stamps + [int((now - b) * 1000) for b in back]
    batches = [_with_max_timestamp(ts) for ts in stamps]
    assert native.batch_ages(batches, now, LATENCY_BUCKETS) is not None  # the compiled path counts
    tp = TopicPartition("t", 0)
    compiled: dict[TopicPartition, PartitionTimes] = {}
    observe_fetch(compiled, tp, batches, True, now)
    with python_path():
        plain: dict[TopicPartition, PartitionTimes] = {}
        observe_fetch(plain, tp, batches, True, now)
    assert compiled[tp].age.counts == plain[tp].age.counts
    assert compiled[tp].age.count == sum(1 for ts in stamps if ts >= 0)
    assert math.isclose(compiled[tp].age.total, plain[tp].age.total, rel_tol=1e-9, abs_tol=1e-9)
    assert compiled[tp].lag_seconds == plain[tp].lag_seconds


def test_batch_ages_refuses_what_is_not_a_batch() -> None:
    assert native.batch_ages([_with_max_timestamp(5), object()], 1.0, LATENCY_BUCKETS) is None


@settings(max_examples=examples(200), deadline=None)
@given(
    pieces=st.lists(st.one_of(
        st.binary(max_size=3000),
        st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8), st.integers(1, 40_000)),
    ), max_size=6),
)
def test_lz4_frame_is_the_python_frame(pieces: list[bytes]) -> None:
    # incompressible and compressible stretches, across the 64 KiB block boundary, and empty
    data = b"".join(pieces)
    compiled = native.lz4_frame(data)
    with python_path():
        plain = compression.compress(Codec.LZ4, data)
    assert compiled == plain
    assert compression.decompress(Codec.LZ4, compiled) == data


@settings(max_examples=examples(300), deadline=None)
@given(specs=st.lists(st.one_of(small_spec_st, small_spec_st, spec_st), min_size=1, max_size=25),
       take=st.integers(1, 25), extra=st.integers(-1, 1), cut_at=st.lists(st.integers(0, 24), max_size=3),
       threshold=st.sampled_from([0, 300, DEFAULT_THRESHOLD]), fetched=st.booleans())
def test_plan_gives_coalesces_segments(
    specs: list[Spec], take: int, extra: int, cut_at: list[int], threshold: int, fetched: bool
) -> None:
    # a run limit equal to (or one byte off) the size of the first `take` batches: the edge the
    # planning decides with `<=`; cuts at some batches' last offsets
    batches = build(specs)
    limit = max(1, sum(b.size for b in batches[:take]) + extra)
    cuts = frozenset(batches[i % len(batches)].last_offset for i in cut_at)
    if fetched:
        split = native.split(memoryview(b"".join(bytes(b.buf) for b in batches)), RecordBatch, True)
        assert split is not None
        batches = split[0]
    planned = native.plan(list(batches), threshold, limit, cuts)
    assert planned is not None
    assert planned == coalesce_module._plan(batches, threshold, limit, cuts)
