"""What the sink writes for one partition's fetched batches: coalesced, rebuilt and split.

Pure (no I/O), used by :class:`mm2py.connectors.mirror_sink.MirrorSink`: :func:`prepare` turns one
source partition's fetched batches into the batches to produce, each with the source range it
covers: runs of small batches merged (:func:`mm2py.protocol.coalesce.coalesce`, when enabled),
batches with compaction gaps rebuilt contiguous (keeping each record's source offset for the
offset syncs), every other batch passed through as the same bytes. A batch the producer must send
again is sent again by the producer, as the same bytes: nothing here is formed twice.

:func:`fit` then splits a batch larger than the target topic accepts (its ``max.message.bytes``)
into batches of the same records that fit (:func:`mm2py.protocol.batch_split.split_batch`), each
with the source range it covers, so offset syncs map every piece exactly; a record that does not
fit even alone ends the partition's batches there (:class:`Unfit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mm2py.protocol.batch_edit import rebuild_contiguous
from mm2py.protocol.batch_split import split_batch
from mm2py.protocol.coalesce import DEFAULT_TARGET, DEFAULT_THRESHOLD, coalesce
from mm2py.protocol.compression import LZ4_DEFAULT_LEVEL
from mm2py.protocol.records import RecordBatch

__all__ = ["CoalesceSettings", "Outgoing", "Unfit", "fit", "prepare"]

_MIB = 1024 * 1024


@dataclass(frozen=True)
class CoalesceSettings:
    """``mm2py.coalesce.*``: merge batches below ``threshold`` bytes up to ``target`` bytes."""

    enabled: bool = True
    threshold: int = DEFAULT_THRESHOLD
    target: int = DEFAULT_TARGET
    #: no merged batch is larger (the target broker's ``message.max.bytes`` default is 1 MiB)
    max_bytes: int = _MIB
    #: compression level of merged LZ4 batches (``mm2py.coalesce.lz4.level``)
    lz4_level: int = LZ4_DEFAULT_LEVEL


@dataclass(frozen=True)
class Outgoing:
    """One batch to produce and the source records it holds."""

    batch: RecordBatch
    #: source offsets of its first and last record
    first: int
    last: int
    #: the source position after it (past the last source batch it covers)
    source_next: int
    #: the source offset of each record, when the batch was rebuilt (compaction gaps)
    record_offsets: list[int] | None = None
    #: number of source batches it holds (more than one: merged)
    sources: int = 1
    #: one of the pieces a batch too large for the target was split into
    split: bool = False


@dataclass(frozen=True)
class Unfit:
    """A record the target refuses even alone: its source offset and the size of a batch holding
    it alone, against the target topic's ``limit``."""

    offset: int
    size: int
    limit: int


def prepare(
    batches: Sequence[RecordBatch], settings: CoalesceSettings | None, limit: int | None = None
) -> list[Outgoing]:
    """The batches to produce for one partition's ``batches`` (CRC-verified by the fetcher); no
    merged batch is larger than ``limit`` (the target topic's, when known)."""
    if settings is not None and settings.enabled and len(batches) > 1:  # one batch: nothing to merge
        max_bytes = settings.max_bytes if limit is None else min(settings.max_bytes, limit)
        groups = [
            (c.batch, c.first_offset, c.last_offset, c.sources)
            for c in coalesce(batches, max_bytes=max_bytes, threshold=settings.threshold,
                              target=settings.target, verified=True, lz4_level=settings.lz4_level)
        ]
    else:
        groups = [(b, b.base_offset, b.last_offset, 1) for b in batches]
    out: list[Outgoing] = []
    for batch, first, last, sources in groups:
        if sources == 1 and not batch.is_contiguous():
            rebuilt, offsets = rebuild_contiguous(batch)
            if offsets:  # else every record was compacted away: nothing to write
                out.append(Outgoing(rebuilt, offsets[0], offsets[-1], batch.next_offset, offsets))
            continue
        out.append(Outgoing(batch, first, last, last + 1, None, sources))
    return out


def fit(outgoing: list[Outgoing], limit: int | None) -> tuple[list[Outgoing], Unfit | None]:
    """``outgoing`` with every batch larger than ``limit`` bytes split into pieces that fit, each
    with its own source range (the last piece keeps the batch's ``source_next``); cut before the
    first record that does not fit alone, which is returned. ``limit`` None: as it is."""
    if limit is None or all(o.batch.size <= limit for o in outgoing):
        return outgoing, None
    out: list[Outgoing] = []
    for o in outgoing:
        if o.batch.size <= limit:
            out.append(o)
            continue
        split = split_batch(o.batch, limit)
        for p in split.pieces:
            offsets = o.record_offsets[p.start:p.end] if o.record_offsets is not None else None
            first = offsets[0] if offsets is not None else p.batch.base_offset
            last = offsets[-1] if offsets is not None else p.batch.last_offset
            whole = p.end == o.batch.records_count
            out.append(Outgoing(p.batch, first, last, o.source_next if whole else last + 1, offsets,
                                o.sources, split=True))
        if (t := split.too_large) is not None:
            offset = o.record_offsets[t.index] if o.record_offsets is not None else t.offset
            return out, Unfit(offset, t.size, limit)
    return out, None
