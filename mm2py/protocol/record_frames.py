"""The framing of the records of many batches at once, read and rewritten with numpy.

Merging small batches (:mod:`mm2py.protocol.batch_merge`) rewrites only the first fields of every
record: its length, timestamp delta and offset delta. Doing that one record at a time in Python
costs more than everything else the merge does, so this module does it for all records of many
batches together, with array operations over the batches' uncompressed records sections laid
back to back in one buffer. Pure (no I/O).

A record is ``length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
key, value, headers``; the last part (the *tail*) is carried over as it is, unparsed, as a
passed-through batch carries it (the target broker validates every record it appends).

:func:`scan` reads the framing of batch *b*'s ``counts[b]`` records from
``buf[starts[b]:ends[b]]``, record *k* of every batch in one step, so it takes as many steps as the
largest batch has records. Its checks are those of a one-record-at-a-time reader: varints of at
most 5 (int32) or 10 (int64) bytes, each record's length at least 1 and within its section, the
fields before the tail within the record, and the section filled exactly by its records.

:func:`reframe` writes groups of consecutive batches as one records section each, every record's
timestamp and offset delta shifted by its batch's shift, and lengths re-encoded.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from mm2py.protocol.errors import CorruptBatchError

__all__ = ["PAD", "Framing", "reframe", "scan"]

Bytes = NDArray[np.uint8]
Ints = NDArray[np.int64]

#: bytes the buffer must hold past the last section: the widest read from a record's start
#: (length 5, attributes 1, timestamp delta 10, offset delta 5) never leaves the buffer
PAD = 32

_COLS = {w: np.arange(w, dtype=np.int64) for w in (5, 10)}
_SHIFTS = {w: np.arange(w, dtype=np.uint64) * np.uint64(7) for w in (5, 10)}
#: the smallest value that needs k+1 varint bytes, k = 1..9
_LIMITS = [np.uint64(1 << (7 * k)) for k in range(1, 10)]
_INT32_MASK = np.uint64(0xFFFFFFFF)
_ONE = np.uint64(1)


def _read(buf: Bytes, pos: Ints, width: int) -> tuple[NDArray[np.uint64], Ints]:
    """Unsigned varints of at most ``width`` bytes at ``pos``: (raw values, sizes; 0 = too long)."""
    cols = buf[pos[:, None] + _COLS[width]]
    last = cols < 0x80
    size = last.argmax(axis=1) + 1
    size[~last.any(axis=1)] = 0
    parts = (cols & 0x7F).astype(np.uint64) << _SHIFTS[width]
    parts[_COLS[width] >= size[:, None]] = 0
    return np.bitwise_or.reduce(parts, axis=1), size


def _unzigzag(u: NDArray[np.uint64]) -> Ints:
    return (u >> _ONE).astype(np.int64) ^ -(u & _ONE).astype(np.int64)


def _encode(values: Ints, width: int) -> tuple[Bytes, Ints]:
    """Zigzag varints of ``values``: (one row of ``width`` bytes per value, sizes)."""
    u = (values.astype(np.uint64) << _ONE) ^ (values >> 63).astype(np.uint64)
    size = np.ones(len(values), dtype=np.int64)
    for limit in _LIMITS[: width - 1]:
        size += u >= limit
    cols = ((u[:, None] >> _SHIFTS[width]) & np.uint64(0x7F)).astype(np.uint8)
    cols[_COLS[width] < size[:, None] - 1] |= 0x80
    return cols, size


def _before(lengths: Ints) -> Ints:
    """Exclusive prefix sums: where each of consecutive pieces of ``lengths`` starts."""
    out = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=out[1:])
    return out


_HEAD_TAIL = np.array([True, False])


def _alternating(first: Ints, second: Ints) -> NDArray[np.bool_]:
    """Mask of ``first[0]`` True, ``second[0]`` False, ``first[1]`` True, ... bytes."""
    lengths = np.empty(2 * len(first), dtype=np.int64)
    lengths[0::2] = first
    lengths[1::2] = second
    return np.repeat(np.tile(_HEAD_TAIL, len(first)), lengths)


@dataclass(frozen=True, slots=True)
class Framing:
    """The framing of every record of the scanned batches. Batch *b*'s records are rows
    ``first[b] .. first[b] + counts[b] - 1`` of the per-record arrays, in order."""

    buf: Bytes
    counts: Ints
    first: Ints
    #: per record: where its length varint starts, where its tail starts and where it ends
    start: Ints
    tail: Ints
    end: Ints
    attributes: Bytes
    timestamp_delta: Ints
    offset_delta: Ints
    #: per batch: every record's offset delta is its index (0..n-1), so it can keep its offsets
    #: in a merge
    in_sequence: NDArray[np.bool_]
    #: per batch: smallest and largest timestamp delta (0 for a batch without records)
    ts_min: Ints
    ts_max: Ints


def scan(buf: Bytes, starts: Ints, ends: Ints, counts: Ints, name: Callable[[int], str]) -> Framing:
    """Read the framing of each batch's records (see the module docstring).

    ``buf`` must extend at least :data:`PAD` bytes past the last section. ``name(b)`` labels
    batch *b* in errors. Raises :class:`CorruptBatchError` for the first batch whose framing does
    not hold."""
    nb = len(starts)
    first = _before(counts)
    total = int(counts.sum()) if nb else 0
    start, tail, end, ts, off = (np.zeros(total, dtype=np.int64) for _ in range(5))
    attributes = np.zeros(total, dtype=np.uint8)
    in_sequence = np.ones(nb, dtype=bool)
    problem: dict[int, str] = {}
    pos = starts.copy()
    active = np.flatnonzero(counts > 0)
    k = 0
    while active.size:
        p, limit = pos[active], ends[active]
        raw, lsize = _read(buf, p, 5)
        length = _unzigzag(raw & _INT32_MASK)
        q = p + lsize
        stop = q + length
        raw_ts, tsize = _read(buf, q + 1, 10)
        raw_off, osize = _read(buf, q + 1 + tsize, 5)
        body = q + 1 + tsize + osize
        bad_len = (lsize == 0) | (length < 1) | (stop > limit)
        bad = bad_len | (tsize == 0) | (osize == 0) | (body > stop)
        for i in np.flatnonzero(bad)[:1].tolist():  # the first is enough: the run fails
            b = int(active[i])
            problem[b] = (
                f"invalid record length {int(length[i])} at byte {int(p[i] - starts[b])}"
                if bad_len[i] else f"record at byte {int(p[i] - starts[b])} is shorter than its header"
            )
        rows = first[active] + k
        start[rows], tail[rows], end[rows] = p, body, stop
        attributes[rows] = buf[q]
        ts[rows] = _unzigzag(raw_ts)
        offs = _unzigzag(raw_off & _INT32_MASK)
        off[rows] = offs
        in_sequence[active[offs != k]] = False
        pos[active] = stop
        k += 1
        active = active[~bad & (counts[active] > k)]
    left = np.flatnonzero(pos != ends)
    for b in sorted(set(left.tolist()) | problem.keys())[:1]:
        reason = problem.get(b) or (
            "records section is truncated" if pos[b] > ends[b]
            else f"{int(ends[b] - pos[b])} bytes remain after the declared {int(counts[b])} records"
        )
        raise CorruptBatchError(f"{name(b)}: {reason}")
    ts_min = np.zeros(nb, dtype=np.int64)
    ts_max = np.zeros(nb, dtype=np.int64)
    has = np.flatnonzero(counts > 0)
    if has.size:
        ts_min[has] = np.minimum.reduceat(ts, first[has])
        ts_max[has] = np.maximum.reduceat(ts, first[has])
    return Framing(buf, counts, first, start, tail, end, attributes, ts, off, in_sequence, ts_min, ts_max)


def reframe(
    framing: Framing, groups: Sequence[tuple[int, int]], ts_shift: Ints, off_shift: Ints
) -> list[bytes]:
    """One records section per group ``(i, j)`` of batches ``i .. j-1``: their records in order,
    each record's timestamp delta plus ``ts_shift[b]`` and offset delta plus ``off_shift[b]`` of
    its batch *b*. The shifted deltas must fit an int64 and an int32 (the caller checks)."""
    if not groups:
        return []
    f = framing
    pieces = [np.arange(f.first[i], f.first[j - 1] + f.counts[j - 1]) for i, j in groups]
    rows = np.concatenate(pieces)
    if not rows.size:
        return [b""] * len(groups)
    batch_of = np.repeat(np.arange(len(f.counts)), f.counts)[rows]
    new_ts, ts_size = _encode(f.timestamp_delta[rows] + ts_shift[batch_of], 10)
    new_off, off_size = _encode(f.offset_delta[rows] + off_shift[batch_of], 5)
    tail_len = f.end[rows] - f.tail[rows]
    new_len, len_size = _encode(1 + ts_size + off_size + tail_len, 5)
    head = np.concatenate([new_len, f.attributes[rows][:, None], new_ts, new_off], axis=1)
    head_mask = np.concatenate(
        [
            _COLS[5] < len_size[:, None],
            np.ones((len(rows), 1), dtype=bool),
            _COLS[10] < ts_size[:, None],
            _COLS[5] < off_size[:, None],
        ],
        axis=1,
    )
    head_len = len_size + 1 + ts_size + off_size
    size = head_len + tail_len
    at = _before(size)
    total = int(size.sum())
    out = np.empty(total, dtype=np.uint8)
    is_head = _alternating(head_len, tail_len)
    out[is_head] = head[head_mask]
    # the source tails: skip each record's old head and any bytes between the selected records
    ends = f.end[rows]
    span = f.buf[f.start[rows[0]] : ends[-1]]
    skip = f.tail[rows] - np.concatenate([f.start[rows[:1]], ends[:-1]])
    out[~is_head] = span[~_alternating(skip, tail_len)]
    bounds = _before(np.array([len(p) for p in pieces], dtype=np.int64))
    cuts = [*np.append(at, total)[bounds].tolist(), total]
    data = out.tobytes()
    return [data[a:b] for a, b in itertools.pairwise(cuts)]
