"""What one fetch brought for one partition: :class:`FetchedPartition`, made from a Fetch
response's partition by :func:`process_partition` (pure: CRCs checked, the first batch cropped, the
truncated tail dropped, aborted transactions and control batches removed), and
:class:`WaitingPartitions`, the order in which partitions left without data are asked for again.
The fetchers (:mod:`.fetcher`, :mod:`.fetch_hub`) send the requests."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from mm2py.protocol.api import AbortedTransaction, FetchPartitionResponse
from mm2py.protocol.batch_edit import crop
from mm2py.protocol.errors_codes import NONE, error_name
from mm2py.protocol.native import CONTROL_SEEN, OUT_OF_ORDER
from mm2py.protocol.records import RecordBatch, split_checked, split_record_set
from mm2py.protocol.transactions import AbortedTransactionFilter
from mm2py.protocol.types import TopicPartition

__all__ = ["FetchedPartition", "WaitingPartitions", "fetched_bytes", "process_partition"]


@dataclass(slots=True)
class FetchedPartition:
    tp: TopicPartition
    fetch_offset: int
    batches: list[RecordBatch] = field(default_factory=list)
    #: where the next fetch should start (past filtered/control batches); == fetch_offset if none
    next_offset: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: tuple[AbortedTransaction, ...] = ()
    error_code: int = NONE
    #: bytes of an incomplete trailing batch that were dropped
    truncated_bytes: int = 0
    #: nothing at all was returned although the partition has (visible) data at ``fetch_offset``:
    #: the broker gave it no room in this response (see the module docstring)
    starved: bool = False

    @property
    def error_name(self) -> str:
        return error_name(self.error_code)

    @property
    def ok(self) -> bool:
        return self.error_code == NONE

    @property
    def stalled(self) -> bool:
        """No complete batch returned although data was sent: the next batch exceeds the size
        limit for this partition (the fetcher then puts it first in the next request, where
        brokers always return at least one whole batch)."""
        return (
            self.ok
            and not self.batches
            and self.next_offset == self.fetch_offset
            and (self.truncated_bytes > 0)
        )


def _keep_from(batches: list[RecordBatch], fetch_offset: int, kept: list[RecordBatch]) -> int:
    """Append to ``kept`` the (CRC-checked, non-control) ``batches`` from ``fetch_offset`` on, the
    first cropped to it; return the position after the last batch kept or skipped by the crop."""
    skip = 0
    while skip < len(batches) and batches[skip].last_offset < fetch_offset:
        skip += 1  # entirely below the requested offset
    if skip == len(batches):
        return fetch_offset
    first = batches[skip]
    if first.base_offset < fetch_offset:
        cropped = crop(first, fetch_offset)
        if cropped is not None:
            kept.append(cropped)
        skip += 1
    kept.extend(batches[skip:])
    return batches[-1].next_offset


def _filter(batches: list[RecordBatch], fetch_offset: int, aborted: Sequence[AbortedTransaction] | None,
            kept: list[RecordBatch]) -> int:
    """Check every batch's CRC and append to ``kept`` those a consumer at ``fetch_offset`` sees
    (read_committed: ``aborted`` is the response's aborted transactions); return the position
    after the last batch at or past ``fetch_offset``."""
    filt = None
    if aborted is not None:
        filt = AbortedTransactionFilter((a.producer_id, a.first_offset) for a in aborted)
    next_offset = fetch_offset
    for batch in batches:
        batch.verify()
        # The filter sees every batch in offset order (ABORT markers close aborted ranges).
        accepted = filt.accept(batch) if filt is not None else True
        if batch.last_offset < fetch_offset:
            continue  # entirely below the requested offset
        next_offset = batch.next_offset
        if not accepted or batch.is_control:
            continue
        if batch.base_offset < fetch_offset:
            cropped = crop(batch, fetch_offset)
            if cropped is None:
                continue
            batch = cropped
        kept.append(batch)
    return next_offset


def process_partition(
    tp: TopicPartition, fetch_offset: int, resp: FetchPartitionResponse, read_committed: bool
) -> FetchedPartition:
    """Turn one partition of a Fetch response into a FetchedPartition (pure, no I/O)."""
    aborted = resp.aborted_transactions or ()
    out = FetchedPartition(
        tp,
        fetch_offset,
        next_offset=fetch_offset,
        high_watermark=resp.high_watermark,
        last_stable_offset=resp.last_stable_offset,
        log_start_offset=resp.log_start_offset,
        aborted_transactions=aborted,
        error_code=resp.error_code,
    )
    if resp.error_code != NONE:
        return out
    checked = split_checked(resp.records) if not aborted else None
    if checked is not None and not checked[2] & (CONTROL_SEEN | OUT_OF_ORDER):
        # every CRC checked, batches in offset order, no control batch, no aborted transaction:
        # every batch from the requested offset on is kept, the first one cropped (as _filter does)
        batches, trailing, _ = checked
        out.truncated_bytes = trailing
        next_offset = _keep_from(batches, fetch_offset, out.batches)
    else:
        batches, trailing = split_record_set(resp.records)
        out.truncated_bytes = trailing
        next_offset = _filter(batches, fetch_offset, aborted if read_committed else None, out.batches)
    out.next_offset = next_offset
    end = resp.last_stable_offset if read_committed and resp.last_stable_offset >= 0 else resp.high_watermark
    out.starved = not batches and trailing == 0 and fetch_offset < end
    return out


class WaitingPartitions:
    """The order of partitions in a fetch request: those left without data (stalled or starved)
    for the most consecutive fetches first, ties and the rest in the caller's order. A partition
    served is back to the end, so partitions waiting together take turns at the front."""

    def __init__(self) -> None:
        #: partition -> fetches in a row that left it without data
        self.waited: dict[TopicPartition, int] = {}

    def order(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        return sorted(partitions, key=lambda tp: -self.waited.get(tp, 0))

    def longest(self, partitions: Container[TopicPartition]) -> int:
        """The most fetches in a row any of ``partitions`` has waited (few wait: it walks those)."""
        return max((n for tp, n in self.waited.items() if tp in partitions), default=0)

    def note(self, fetched: FetchedPartition) -> None:
        if fetched.stalled or fetched.starved:
            self.waited[fetched.tp] = self.waited.get(fetched.tp, 0) + 1
        else:
            self.waited.pop(fetched.tp, None)


class _HasBatches(Protocol):
    @property
    def batches(self) -> Sequence[RecordBatch]: ...


def fetched_bytes(fetched: Mapping[TopicPartition, _HasBatches], limit: int) -> int:
    """The bytes of ``fetched``'s batches (per partition: a :class:`FetchedPartition`, or anything
    else with ``batches``), counted only until ``limit`` (a backlog's fetch of thousands of batches
    is not walked)."""
    total = 0
    for f in fetched.values():
        for b in f.batches:
            total += b.size
            if total >= limit:
                return total
    return total
