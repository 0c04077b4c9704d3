"""A batch larger than the target accepts, split into batches of the same records that fit.

A target topic refuses a batch larger than its ``max.message.bytes`` (MESSAGE_TOO_LARGE). The
mirror then produces the batch's records as several smaller batches, in order: every record keeps
its offset (as a delta from its piece's first record), timestamp, attributes, key, value and
headers (their bytes copied as they are, :func:`mm2py.protocol.batch_edit.reencode`); each piece
keeps the batch's codec (decompressed once, each piece compressed again with cramjam) and
attributes, and gets a fresh CRC-32C.

Pieces are cut by the records' uncompressed sizes scaled by the batch's own compression ratio,
then each is built and measured: one that still comes out larger than the limit is cut in two
until it fits. A record that does not fit even alone (a batch of it alone is larger than the
limit) ends the split there: the pieces before it are returned, and where it is and how large
(:class:`Split` ``too_large``). A piece is a pure function of the batch and the records it holds
(:func:`piece_of`), so the tail reconciler recognises one on the target whatever the limit was when
it was written. Pure, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from mm2py.protocol.batch_edit import increment_sequence, reencode
from mm2py.protocol.compression import Codec
from mm2py.protocol.record_codec import RawRecord, records_section, scan_raw_records
from mm2py.protocol.records import HEADER_SIZE, RecordBatch

__all__ = ["Piece", "Split", "TooLarge", "piece_of", "split_batch"]

#: the share of the limit a piece is cut for before it is measured (room for a codec's variance)
_FILL = 0.9


@dataclass(frozen=True)
class Piece:
    """One batch of a split: the original batch's records ``start``..``end - 1`` (by index)."""

    batch: RecordBatch
    start: int
    end: int


@dataclass(frozen=True)
class TooLarge:
    """A record that does not fit under the limit alone: its index in the batch, its absolute
    offset and the size of a batch holding it alone (what the target would refuse)."""

    index: int
    offset: int
    size: int


@dataclass(frozen=True)
class Split:
    """The pieces, in order, covering the batch's records from the first up to ``too_large`` (or
    all of them)."""

    pieces: list[Piece]
    too_large: TooLarge | None = None


def split_batch(batch: RecordBatch, limit: int) -> Split:
    """``batch`` as batches of at most ``limit`` bytes each (the whole batch when it fits)."""
    if batch.size <= limit or batch.records_count == 0:
        return Split([Piece(batch, 0, batch.records_count)])
    section = records_section(batch)
    raws = scan_raw_records(section, batch.records_count)
    ratio = len(batch.records_view) / len(section) if batch.codec is not Codec.NONE and section else 1.0
    budget = max(1, int((limit - HEADER_SIZE) * _FILL / max(ratio, 1e-3)))
    builder = _Builder(batch, section, raws, limit)
    pieces: list[Piece] = []
    start, filled = 0, 0
    for i, (_attrs, _ts, _off, _key, end) in enumerate(raws):
        size = end - (raws[i - 1][4] if i else 0)
        if i > start and filled + size > budget:
            if (stop := builder.fit(start, i, pieces)) is not None:
                return Split(pieces, stop)
            start, filled = i, 0
        filled += size
    return Split(pieces, builder.fit(start, len(raws), pieces))


def piece_of(batch: RecordBatch, start: int, end: int) -> RecordBatch:
    """Records ``start``..``end - 1`` (by index) of ``batch`` as the split writes them."""
    section = records_section(batch)
    return _Builder(batch, section, scan_raw_records(section, batch.records_count), 0).build(start, end)


class _Builder:
    """Builds pieces of one batch and cuts those that come out too large."""

    def __init__(self, batch: RecordBatch, section: bytes, raws: list[RawRecord], limit: int) -> None:
        self.batch = batch
        self.section = section
        self.raws = raws
        self.limit = limit

    def build(self, start: int, end: int) -> RecordBatch:
        batch, kept = self.batch, self.raws[start:end]
        base = batch.base_offset
        first = base + kept[0][2]
        times = [batch.base_timestamp + r[1] for r in kept]
        seq = batch.base_sequence
        return reencode(
            batch, self.section, kept,
            base_offset=first,
            offset_deltas=[base + r[2] - first for r in kept],
            base_timestamp=batch.base_timestamp if batch.has_delete_horizon else times[0],
            max_timestamp=batch.max_timestamp if batch.timestamp_type == 1 else max(times),
            last_offset_delta=base + kept[-1][2] - first,
            base_sequence=increment_sequence(seq, first - base) if seq >= 0 else seq,
        )

    def fit(self, start: int, end: int, out: list[Piece]) -> TooLarge | None:
        """Records ``start``..``end - 1`` appended to ``out`` as pieces that fit, cut in two until
        they do; the first record that does not fit alone stops it (returned)."""
        piece = self.build(start, end)
        if piece.size <= self.limit:
            out.append(Piece(piece, start, end))
            return None
        if end - start == 1:
            return TooLarge(start, self.batch.base_offset + self.raws[start][2], piece.size)
        mid = (start + end) // 2
        return self.fit(start, mid, out) or self.fit(mid, end, out)
