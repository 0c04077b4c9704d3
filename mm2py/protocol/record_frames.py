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
from mm2py.protocol.record_codec import read_record_head, varint_bytes

__all__ = ["PAD", "Framing", "reframe", "scan"]

Bytes = NDArray[np.uint8]
Ints = NDArray[np.int64]

#: up to this many records in all, :func:`scan` and :func:`reframe` work one record at a time:
#: numpy's set-up per call (about 0.7 ms for a scan and re-framing) costs more than the loop for a
#: handful of batches, which is what a live partition brings per fetch
SCALAR_RECORDS = 256

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


def scan(
    buf: Bytes, starts: Ints, ends: Ints, counts: Ints, name: Callable[[int], str],
    *, scalar_up_to: int = SCALAR_RECORDS,
) -> Framing:
    """Read the framing of each batch's records (see the module docstring).

    ``buf`` must extend at least :data:`PAD` bytes past the last section. ``name(b)`` labels
    batch *b* in errors. Raises :class:`CorruptBatchError` for the first batch whose framing does
    not hold. Up to ``scalar_up_to`` records in all are read one at a time."""
    nb = len(starts)
    total = int(counts.sum()) if nb else 0
    if total <= scalar_up_to:
        return _scan_records(buf, starts, ends, counts, name)
    first = _before(counts)
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
            f"{int(ends[b] - pos[b])} bytes remain after the declared {int(counts[b])} records"
        )
        raise CorruptBatchError(f"{name(b)}: {reason}")
    return _framing(buf, counts, first, start, tail, end, attributes, ts, off, in_sequence)


def _framing(
    buf: Bytes, counts: Ints, first: Ints, start: Ints, tail: Ints, end: Ints, attributes: Bytes,
    ts: Ints, off: Ints, in_sequence: NDArray[np.bool_],
) -> Framing:
    nb = len(counts)
    ts_min = np.zeros(nb, dtype=np.int64)
    ts_max = np.zeros(nb, dtype=np.int64)
    has = np.flatnonzero(counts > 0)
    if has.size:
        ts_min[has] = np.minimum.reduceat(ts, first[has])
        ts_max[has] = np.maximum.reduceat(ts, first[has])
    return Framing(buf, counts, first, start, tail, end, attributes, ts, off, in_sequence, ts_min, ts_max)


def _scan_records(
    buf: Bytes, starts: Ints, ends: Ints, counts: Ints, name: Callable[[int], str]
) -> Framing:
    """:func:`scan` one record at a time (the same checks)."""
    data = buf.data  # a memoryview: indexing it gives Python ints
    fields: list[tuple[int, int, int, int, int, int]] = []
    per_batch: list[tuple[bool, int, int]] = []  # in sequence, smallest and largest ts delta
    bounds = zip(starts.tolist(), ends.tolist(), counts.tolist(), strict=True)
    for b, (section, limit, count) in enumerate(bounds):
        pos, ordered, low, high = section, True, 0, 0
        try:
            for k in range(count):
                stop, attributes, ts_delta, off_delta, p = read_record_head(data, pos, limit, section)
                if p > stop:
                    raise CorruptBatchError(f"record at byte {pos - section} is shorter than its header")
                fields.append((pos, p, stop, attributes, ts_delta, off_delta))
                ordered = ordered and off_delta == k
                low, high = (ts_delta, ts_delta) if k == 0 else (min(low, ts_delta), max(high, ts_delta))
                pos = stop
        except CorruptBatchError as exc:
            raise CorruptBatchError(f"{name(b)}: {exc}") from None
        except IndexError:  # not with PAD bytes after the last section
            raise CorruptBatchError(f"{name(b)}: records section is truncated") from None
        if pos != limit:
            raise CorruptBatchError(
                f"{name(b)}: {limit - pos} bytes remain after the declared {count} records"
            )
        per_batch.append((ordered, low, high))
    rows = np.array(fields, dtype=np.int64).reshape(len(fields), 6)
    batches = np.array(per_batch, dtype=np.int64).reshape(len(per_batch), 3)
    return Framing(buf, counts, _before(counts), rows[:, 0], rows[:, 1], rows[:, 2],
                   rows[:, 3].astype(np.uint8), rows[:, 4], rows[:, 5], batches[:, 0].astype(bool),
                   batches[:, 1], batches[:, 2])


def reframe(
    framing: Framing, groups: Sequence[tuple[int, int]], ts_shift: Sequence[int], off_shift: Sequence[int],
    *, scalar_up_to: int = SCALAR_RECORDS,
) -> list[bytes]:
    """One records section per group ``(i, j)`` of batches ``i .. j-1``: their records in order,
    each record's timestamp delta plus ``ts_shift[b]`` and offset delta plus ``off_shift[b]`` of
    its batch *b*. The shifted deltas must fit an int64 and an int32 (the caller checks). Up to
    ``scalar_up_to`` records in all are written one at a time."""
    if not groups:
        return []
    f = framing
    if len(f.start) <= scalar_up_to:
        return _reframe_records(f, groups, ts_shift, off_shift)
    ts_shifts = np.array(ts_shift, dtype=np.int64)
    off_shifts = np.array(off_shift, dtype=np.int64)
    pieces = [np.arange(f.first[i], f.first[j - 1] + f.counts[j - 1]) for i, j in groups]
    rows = np.concatenate(pieces)
    if not rows.size:
        return [b""] * len(groups)
    batch_of = np.repeat(np.arange(len(f.counts)), f.counts)[rows]
    new_ts, ts_size = _encode(f.timestamp_delta[rows] + ts_shifts[batch_of], 10)
    new_off, off_size = _encode(f.offset_delta[rows] + off_shifts[batch_of], 5)
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


def _reframe_records(f: Framing, groups: Sequence[tuple[int, int]], ts_shift: Sequence[int],
                     off_shift: Sequence[int]) -> list[bytes]:
    """:func:`reframe` one record at a time."""
    data = f.buf.data
    first, counts = f.first.tolist(), f.counts.tolist()
    tail, end, attributes = f.tail.tolist(), f.end.tolist(), f.attributes.tolist()
    ts, off = f.timestamp_delta.tolist(), f.offset_delta.tolist()
    table, small = _VARINTS, _SMALL
    out: list[bytes] = []
    for i, j in groups:
        parts: list[bytes | memoryview] = []
        for b in range(i, j):
            ts_shift_b, off_shift_b = ts_shift[b], off_shift[b]
            for r in range(first[b], first[b] + counts[b]):
                t = ts[r] + ts_shift_b
                o = off[r] + off_shift_b
                ts_b = table[t + small] if -small <= t < small else varint_bytes(t, long=True)
                off_b = table[o + small] if o < small else varint_bytes(o)
                size = 1 + len(ts_b) + len(off_b) + end[r] - tail[r]
                parts += (table[size + small] if size < small else varint_bytes(size), _BYTE[attributes[r]],
                          ts_b, off_b, data[tail[r] : end[r]])
        out.append(b"".join(parts))
    return out


#: zigzag varints of -8192..8191 (one or two bytes) and single bytes, looked up by the loop above
_SMALL = 8192
_VARINTS = [varint_bytes(v) for v in range(-_SMALL, _SMALL)]
_BYTE = [bytes((v,)) for v in range(256)]
