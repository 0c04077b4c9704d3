"""Coalescing of consecutive small record batches of one partition into larger batches.

A source topic written by producers that send tiny batches (``linger.ms=0`` under light load: about
1 KiB, a few records each) would be mirrored batch for batch, and every tiny batch would cost the
target broker and every downstream consumer its per-batch work. :func:`coalesce` merges runs of
such batches into one batch each, up to a target size, and passes every other batch through as
the very same :class:`~mm2py.protocol.records.RecordBatch` (the same bytes). Pure (no I/O); the
merge itself is :mod:`mm2py.protocol.batch_merge`.

Invariants
----------
A *run* is a maximal group of input batches merged into one output batch.

``ELIGIBLE``
    Only batches smaller than ``threshold`` bytes that are
    :func:`~mm2py.protocol.batch_merge.merge_eligible` take part: magic 2, contiguous, no control,
    transactional, LogAppendTime or delete-horizon bit. Any other batch ends the run before it and
    is passed through.
``IN-ORDER``
    The input is one partition's batches in offset order (:class:`ValueError` otherwise). Outputs
    come in input order and cover exactly the input batches: output *k* covers inputs ``index ..
    index + sources - 1`` and source offsets ``first_offset .. last_offset``.
``NO-GAP``, ``SAME-ATTRIBUTES``
    Within a run every batch starts right after the previous one's last offset (offset gaps --
    compaction, aborted transactions, control markers -- end a run) and all have the same
    attributes: the same codec and timestamp type. Source producer ids and epochs may differ: the
    mirror's producer writes its own on every batch.
``SIZE``
    A run grows while the sum of its input batch sizes stays <= ``min(target, max_bytes)``. A
    merged batch that still comes out larger than ``max_bytes`` is split in halves, recursively.
``EXACT-RECORDS``
    A merged batch holds every record of its run, in order, with its key, value, headers, record
    attributes, timestamp and offset unchanged; baseOffset is the run's first offset and offsets
    are contiguous, so the record at ``batch.base_offset + i`` is the source record at
    ``first_offset + i``. The run's codec is kept (decompressed and compressed again, only for
    merged runs); CRC-32C computed.
``VERIFIED``
    Every batch has its CRC-32C checked (here, unless the caller says it did: ``verified=True``),
    and every batch of a run its records section decompressed and its records' framing (length,
    attributes, deltas) parsed, before anything is built from it: corrupt input raises
    :class:`~mm2py.protocol.errors.CorruptBatchError` and nothing is returned. Keys, values and
    headers are carried over unparsed, as in a passed-through batch.
``CUTS``
    A run always ends at a batch whose last offset is in ``cuts``. Runs are otherwise a function of
    the input only up to its end: a fetch that ends mid-run yields a shorter last run than a
    longer fetch from the same offset would; passing the ends of runs formed earlier as ``cuts``
    forms the same runs again from the same start offset. (The mirror does not need this: its
    producer re-sends a batch whose acknowledgement was lost as the bytes it sent.)

Defaults
--------
``DEFAULT_THRESHOLD`` is 8 KiB, half the Java producer's default ``batch.size`` (16 KiB): a
producer that fills its batches (the case the shallow mirror serves best, with zero codec work) is
left alone, while the batches of ``linger.ms=0`` producers and sparse keys, where the per-batch cost
(61-byte header, broker validation and index work, a consumer's per-batch decompression) dominates,
are merged. A 16 KiB threshold would pull nearly every full batch of a default producer into
decompress and recompress for little gain.

``DEFAULT_TARGET`` is 64 KiB: the per-batch overhead is below 0.1% there, lz4 compresses in
independent 64 KiB blocks and snappy in 32 KiB ones (bigger batches barely compress better), and it
stays far below the brokers' default ``message.max.bytes`` (1 MiB), so a target topic would need a
very low ``max.message.bytes`` to refuse a merged batch. A merged batch is never bigger than the
caller's ``max_bytes``.

Merged LZ4 batches are compressed in LZ4's fast mode by default (``lz4_level`` 0, what librdkafka
writes): on half-KiB input batches the high-compression mode (level 3 and up; Kafka's Java producer
defaults to 9) cost about five times the CPU of the fast one for merged batches about 15% smaller.

Work is done in chunks of runs (``_CHUNK_BYTES`` of input): their batches are decompressed into one
buffer and their records re-framed together with array operations
(:mod:`~mm2py.protocol.record_frames`), not record by record.

:class:`~mm2py.protocol.compression.CodecCounters` counts the codec work (every decompression and
compression goes through :mod:`~mm2py.protocol.compression`); :class:`CoalesceCounters` counts the
merges themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from mm2py.protocol import native as _native
from mm2py.protocol.batch_merge import (
    MergedRecords,
    RunScan,
    eligible_fields,
    follows_fields,
    merged_batch,
    scan_runs,
)
from mm2py.protocol.compression import CodecCounters
from mm2py.protocol.records import LOG_OVERHEAD, RecordBatch

__all__ = ["DEFAULT_TARGET", "DEFAULT_THRESHOLD", "CoalesceCounters", "Coalesced", "coalesce"]

#: Batches smaller than this many bytes are merged (see the module docstring).
DEFAULT_THRESHOLD = 8 * 1024
#: A run of merged batches grows up to this many input bytes (capped by the caller's maximum).
DEFAULT_TARGET = 64 * 1024


class CoalesceCounters:
    """Process-wide counts of merges (codec work itself is in ``CodecCounters``)."""

    #: merged batches built (and returned)
    merged_batches: int = 0
    #: input batches that went into them
    merged_inputs: int = 0
    #: merged batches over ``max_bytes`` that were split again
    oversize_splits: int = 0
    #: runs cut because a batch could not be merged after decoding (offset deltas, time range)
    fallbacks: int = 0

    @classmethod
    def snapshot(cls) -> tuple[int, int, int, int]:
        return cls.merged_batches, cls.merged_inputs, cls.oversize_splits, cls.fallbacks


@dataclass(frozen=True, slots=True)
class Coalesced:
    """One output batch of :func:`coalesce` and the source range it covers.

    ``batch`` is the input batch itself when ``sources == 1``. For a merged batch (``sources >
    1``) the record at ``batch.base_offset + i`` is the source record at ``first_offset + i``
    (``batch.base_offset == first_offset``).
    """

    batch: RecordBatch
    #: source offset of the first record covered (the first input batch's baseOffset)
    first_offset: int
    #: source offset of the last record covered (the last input batch's last offset)
    last_offset: int
    #: number of input batches covered (1 = passed through)
    sources: int
    #: position of the first covered batch in the input sequence
    index: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def merged(self) -> bool:
        return self.sources > 1


@dataclass(frozen=True, slots=True)
class _NativeRun:
    """A run the compiled path merged, and its steps (see :mod:`mm2py.protocol.native`)."""

    run: list[RecordBatch]
    steps: list[tuple[int, ...]]


#: runs are decoded and merged together in chunks of about this many input bytes (bounds the
#: scratch memory of one call while keeping the per-call array work amortised)
_CHUNK_BYTES = 2 * 1024 * 1024


class _Builder:
    """Collects passed-through batches and runs in input order; :meth:`flush` decodes the runs
    of what it holds in one :func:`scan_runs` and emits everything in order."""

    __slots__ = ("lz4_level", "max_bytes", "out", "pending", "pending_bytes", "verified")

    def __init__(self, max_bytes: int, verified: bool, lz4_level: int | None) -> None:
        self.max_bytes = max_bytes
        self.verified = verified
        self.lz4_level = lz4_level
        self.out: list[Coalesced] = []
        #: batches to pass through (a list of one) and runs to merge, with their input index
        self.pending: list[tuple[list[RecordBatch], int]] = []
        self.pending_bytes = 0

    def add(self, run: list[RecordBatch], index: int, size: int) -> None:
        self.pending.append((run, index))
        if len(run) > 1:
            self.pending_bytes += size
            if self.pending_bytes >= _CHUNK_BYTES:
                self.flush()

    def passthrough(self, batch: RecordBatch, index: int) -> None:
        self.out.append(Coalesced(batch, batch.base_offset, batch.last_offset, 1, index))

    def flush(self) -> None:
        # runs the compiled path merges (see mm2py.protocol.native); the others are scanned together
        native: dict[int, list[tuple[int, ...]]] = {}
        if _native.AVAILABLE:
            for at, (run, _) in enumerate(self.pending):
                if len(run) > 1 and (done := self._native_steps(run)) is not None:
                    native[at] = done
        runs = [b for at, (run, _) in enumerate(self.pending)
                if len(run) > 1 and at not in native for b in run]
        scanned = scan_runs(runs, verified=self.verified) if runs else None
        # what to emit, in order: a batch passed through, a group (i, j) of scanned batches, or
        # the compiled path's steps for a run
        steps: list[tuple[RecordBatch | tuple[int, int] | _NativeRun, int]] = []
        at = 0
        for p, (run, index) in enumerate(self.pending):
            if len(run) == 1:
                if not self.verified:
                    run[0].verify()
                steps.append((run[0], index))
            elif p in native:
                steps.append((_NativeRun(run, native[p]), index))
            else:
                assert scanned is not None
                steps.extend(self._groups(scanned, at, len(run), index))
                at += len(run)
        self.pending.clear()
        self.pending_bytes = 0
        groups = [s for s, _ in steps if isinstance(s, tuple)]
        merged = iter(scanned.merge(groups)) if scanned is not None else iter(())
        for step, index in steps:
            if isinstance(step, RecordBatch):
                self.passthrough(step, index)
            elif isinstance(step, _NativeRun):
                self._emit_native(step.run, step.steps, index)
            else:
                assert scanned is not None
                self._emit(scanned.batches, step, next(merged), index, scanned.remerge)

    def _native_steps(self, run: list[RecordBatch]) -> list[tuple[int, ...]] | None:
        done = _native.merge(run, not self.verified)
        if done is None:
            return None
        steps, decompressions = done
        CodecCounters.decompressions += decompressions
        return steps

    def _emit_native(self, run: list[RecordBatch], steps: list[tuple[int, ...]], index: int) -> None:
        """Emit the compiled path's steps for ``run`` (input positions from ``index``), as
        :meth:`_groups` and :meth:`_emit` do for a scanned run."""

        def remerge(a: int, b: int) -> MergedRecords | None:
            again = _native.merge(run[a:b], False)  # part of a run it merged: never refused
            assert again is not None
            (step,) = again[0]
            return _native_merged(run[a], step)

        for step in steps:
            kind, i = step[0], step[1]
            if kind in (_native.PASS, _native.PASS_OUT_OF_SEQUENCE):
                CoalesceCounters.fallbacks += kind == _native.PASS_OUT_OF_SEQUENCE
                self.passthrough(run[i], index + i)
            else:
                self._emit(run, (i, step[2]), _native_merged(run[i], step), index + i, remerge)

    @staticmethod
    def _groups(
        scanned: RunScan, at: int, n: int, index: int
    ) -> list[tuple[RecordBatch | tuple[int, int], int]]:
        """A run's scanned batches ``at .. at+n-1`` as groups to merge, cut around any batch whose
        records cannot keep their offsets (passed through)."""
        steps: list[tuple[RecordBatch | tuple[int, int], int]] = []
        i = at
        for k in range(at, at + n + 1):
            if k < at + n and scanned.in_sequence(k):
                continue
            if k - i > 1:
                steps.append(((i, k), index + i - at))
            elif k - i == 1:
                steps.append((scanned.batches[i], index + i - at))
            if k < at + n:  # this batch cannot keep its offsets in a merge: cut the run around it
                CoalesceCounters.fallbacks += 1
                steps.append((scanned.batches[k], index + k - at))
            i = k + 1
        return steps

    def _emit(
        self, batches: Sequence[RecordBatch], group: tuple[int, int], merged: MergedRecords | None,
        index: int, remerge: Callable[[int, int], MergedRecords | None],
    ) -> None:
        """Emit the merge of ``batches[i:j]`` (``None``: it cannot be merged); a merged batch over
        ``max_bytes`` is split in halves, each merged again with ``remerge(a, b)``."""
        i, j = group
        if merged is None:
            # timestamps too far apart for one batch's deltas: leave the batches as they are
            CoalesceCounters.fallbacks += 1
            for k in range(i, j):
                self.passthrough(batches[k], index + k - i)
            return
        batch = merged_batch(merged, lz4_level=self.lz4_level)
        if len(batch) > self.max_bytes:
            CoalesceCounters.oversize_splits += 1
            half = (j - i) // 2
            for a, b in ((i, i + half), (i + half, j)):
                if b - a == 1:
                    self.passthrough(batches[a], index + a - i)
                else:
                    self._emit(batches, (a, b), remerge(a, b), index + a - i, remerge)
            return
        CoalesceCounters.merged_batches += 1
        CoalesceCounters.merged_inputs += j - i
        first, last = batches[i], batches[j - 1]
        self.out.append(Coalesced(batch, first.base_offset, last.last_offset, j - i, index))


def _native_merged(first: RecordBatch, step: tuple[int, ...]) -> MergedRecords | None:
    """The merge a compiled-path step describes (``first``: its first batch); ``None`` for a
    stretch whose timestamps lie too far apart."""
    if step[0] == _native.PASS_TIME_RANGE:
        return None
    assert step[0] == _native.MERGED
    _, _, _, section, lo, hi, count = step
    return MergedRecords(first.attributes, first.base_offset, count, lo, hi, section)  # type: ignore[arg-type]


def _limit(threshold: int, target: int, max_bytes: int) -> int:
    """The largest input of a run; ``ValueError`` for sizes that make no sense."""
    if threshold < 0 or target < 1 or max_bytes < 1:
        raise ValueError(
            f"bad coalescing sizes: threshold={threshold} target={target} max_bytes={max_bytes}"
        )
    return min(target, max_bytes)


def coalesce(
    batches: Sequence[RecordBatch],
    *,
    max_bytes: int,
    threshold: int = DEFAULT_THRESHOLD,
    target: int = DEFAULT_TARGET,
    verified: bool = False,
    cuts: Collection[int] = (),
    lz4_level: int | None = None,
) -> list[Coalesced]:
    """Merge runs of consecutive small batches of one partition (see the module invariants).

    ``batches``: one partition's batches in offset order, as fetched (cropped and filtered).
    ``max_bytes``: hard upper size of a merged batch. ``threshold``: only batches smaller than
    this take part. ``target``: a run grows while its input sizes add up to at most
    ``min(target, max_bytes)``. ``verified=True``: the caller checked every CRC already.
    ``cuts``: source last offsets where a run must end. ``lz4_level``: see ``compress``.

    Returns the output batches in order, each with the source range it covers. Raises
    ``CorruptBatchError`` for a corrupt input batch, ``ValueError`` for bad arguments or input
    out of offset order.
    """
    limit = _limit(threshold, target, max_bytes)
    builder = _Builder(max_bytes, verified, lz4_level)
    segments = _native.plan(batches, threshold, limit, cuts) if isinstance(batches, list) else None
    if segments is None:  # no compiled path, or it leaves the input to this one (e.g. to raise)
        segments = _plan(batches, threshold, limit, cuts)
    for start, end, size in segments:
        builder.add(list(batches[start:end]), start, size)
    builder.flush()
    return builder.out


def _plan(
    batches: Sequence[RecordBatch], threshold: int, limit: int, cuts: Collection[int]
) -> list[tuple[int, int, int]]:
    """Which batches form runs to merge: ``(start, end, bytes)`` segments covering ``batches`` in
    order, a run of merge-eligible batches that follow each other within ``limit`` bytes (ended
    after a last offset in ``cuts``), or one batch passed through. The compiled path's ``plan``
    gives the same segments (``_native_plan.c``)."""
    out: list[tuple[int, int, int]] = []
    run = -1  # start of the open run (-1: none)
    run_bytes = 0
    prev_last = prev_attrs = -1
    for index, b in enumerate(batches):
        base, length, _, magic, _, attrs, last_delta, _, _, _, _, _, count = b.fields
        if base <= prev_last:
            raise ValueError(
                f"batch at offset {base} does not follow the previous batch (last offset "
                f"{prev_last}): one partition's batches in offset order expected"
            )
        size = length + LOG_OVERHEAD
        joins = follows_fields(prev_last, prev_attrs, base, attrs)
        prev_last, prev_attrs = base + last_delta, attrs
        if size < threshold and eligible_fields(magic, attrs, last_delta, count):
            if run >= 0 and run_bytes + size <= limit and joins:
                run_bytes += size
            else:
                if run >= 0:
                    out.append((run, index, run_bytes))
                run, run_bytes = index, size
            if prev_last in cuts:
                out.append((run, index + 1, run_bytes))
                run = -1
            continue
        if run >= 0:
            out.append((run, index, run_bytes))
            run = -1
        out.append((index, index + 1, size))
    if run >= 0:
        out.append((run, len(batches), run_bytes))
    return out
