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
    Every batch of a run has its CRC-32C checked, and its records section decompressed and its
    records' framing (length, attributes, deltas) parsed, before anything is built from it: corrupt
    input raises :class:`~mm2py.protocol.errors.CorruptBatchError` and nothing is returned. Keys,
    values and headers are carried over unparsed, as in a passed-through batch. Passed-through
    batches are CRC-checked too unless the caller says it did (``verified=True``).
``CUTS``
    A run always ends at a batch whose last offset is in ``cuts``. Runs are otherwise a function of
    the input only up to its end: a fetch that ends mid-run yields a shorter last run than a
    longer fetch from the same offset would. A producer that re-sends a batch whose
    acknowledgement was lost must send the same records under the same sequence number for the
    broker to recognise it, so after a failed produce the caller passes the ranges it had sent as
    ``cuts``, and the same runs come out again from the same start offset.

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

:class:`~mm2py.protocol.compression.CodecCounters` counts the codec work (every decompression and
compression goes through :mod:`~mm2py.protocol.compression`); :class:`CoalesceCounters` counts the
merges themselves.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from mm2py.protocol.batch_merge import (
    Scanned,
    follows,
    merge_eligible,
    merge_scanned,
    merged_batch,
    scan_for_merge,
)
from mm2py.protocol.records import RecordBatch

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


class _Builder:
    __slots__ = ("max_bytes", "out", "verified")

    def __init__(self, max_bytes: int, verified: bool) -> None:
        self.max_bytes = max_bytes
        self.verified = verified
        self.out: list[Coalesced] = []

    def passthrough(self, batch: RecordBatch, index: int) -> None:
        self.out.append(Coalesced(batch, batch.base_offset, batch.last_offset, 1, index))

    def run(self, run: list[RecordBatch], index: int) -> None:
        """Emit ``run`` (eligible batches following each other) merged, or split where needed."""
        if len(run) == 1:
            if not self.verified:
                run[0].verify()
            self.passthrough(run[0], index)
            return
        scanned: list[Scanned] = []
        for i, b in enumerate(run):
            s = scan_for_merge(b)
            if s is None:
                # this batch cannot keep its offsets in a merge: cut the run around it
                CoalesceCounters.fallbacks += 1
                self._merged(run[:i], scanned, index)
                self.passthrough(b, index + i)
                if i + 1 < len(run):
                    self.run(run[i + 1 :], index + i + 1)
                return
            scanned.append(s)
        self._merged(run, scanned, index)

    def _merged(self, run: list[RecordBatch], scanned: list[Scanned], index: int) -> None:
        if not run:
            return
        if len(run) == 1:
            self.passthrough(run[0], index)
            return
        try:
            batch = merged_batch(merge_scanned(run, scanned))
        except (ValueError, OverflowError):
            # timestamps too far apart for one batch's deltas: leave the batches as they are
            CoalesceCounters.fallbacks += 1
            for i, b in enumerate(run):
                self.passthrough(b, index + i)
            return
        if len(batch) > self.max_bytes:
            CoalesceCounters.oversize_splits += 1
            half = len(run) // 2
            self._merged(run[:half], scanned[:half], index)
            self._merged(run[half:], scanned[half:], index + half)
            return
        CoalesceCounters.merged_batches += 1
        CoalesceCounters.merged_inputs += len(run)
        self.out.append(Coalesced(batch, run[0].base_offset, run[-1].last_offset, len(run), index))


def coalesce(
    batches: Sequence[RecordBatch],
    *,
    max_bytes: int,
    threshold: int = DEFAULT_THRESHOLD,
    target: int = DEFAULT_TARGET,
    verified: bool = False,
    cuts: Collection[int] = (),
) -> list[Coalesced]:
    """Merge runs of consecutive small batches of one partition (see the module invariants).

    ``batches``: one partition's batches in offset order, as fetched (cropped and filtered).
    ``max_bytes``: hard upper size of a merged batch. ``threshold``: only batches smaller than
    this take part. ``target``: a run grows while its input sizes add up to at most
    ``min(target, max_bytes)``. ``verified=True``: the caller checked every CRC already, so
    passed-through batches are not checked again (merged ones always are). ``cuts``: source last
    offsets where a run must end.

    Returns the output batches in order, each with the source range it covers. Raises
    ``CorruptBatchError`` for a corrupt input batch and ``ValueError`` for bad arguments or input
    out of offset order.
    """
    if threshold < 0 or target < 1 or max_bytes < 1:
        raise ValueError(
            f"bad coalescing sizes: threshold={threshold} target={target} max_bytes={max_bytes}"
        )
    limit = min(target, max_bytes)
    builder = _Builder(max_bytes, verified)
    run: list[RecordBatch] = []
    run_index = run_bytes = 0
    prev_last: int | None = None
    for index, b in enumerate(batches):
        if prev_last is not None and b.base_offset <= prev_last:
            raise ValueError(
                f"batch at offset {b.base_offset} does not follow the previous batch (last offset "
                f"{prev_last}): one partition's batches in offset order expected"
            )
        prev_last = b.last_offset
        size = len(b)
        if size < threshold and merge_eligible(b):
            if run and run_bytes + size <= limit and follows(run[-1], b):
                run.append(b)
                run_bytes += size
            else:
                if run:
                    builder.run(run, run_index)
                run, run_index, run_bytes = [b], index, size
            if b.last_offset in cuts:
                builder.run(run, run_index)
                run = []
            continue
        if run:
            builder.run(run, run_index)
            run = []
        if not verified:
            b.verify()
        builder.passthrough(b, index)
    if run:
        builder.run(run, run_index)
    return builder.out
