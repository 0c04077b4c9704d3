"""``mm2py audit``'s reads: both sides of every partition fetched as raw batches and fed to its
:class:`~mm2py.engine.audit.PartitionAudit` until each reaches its conclusion.

One :class:`~mm2py.client.fetcher.RawFetcher` per cluster; each round sends one Fetch per leader
on each side at once, for the partitions whose walk wants more of that side (a walk is fetched for
while it holds under 16 MiB of a side it has not compared), then every walk compares what arrived. The
sides are read with the flow's isolation level (``read_committed`` by default: aborted
transactions and control batches are left out of the source, as the mirror leaves them out, and of
the target, where only another writer's transactions can put them). Fetches do not wait on the
broker: every partition is read only up to the end it had when the audit began.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mm2py.client.fetcher import FetchedPartition, FetcherConfig, RawFetcher
from mm2py.engine.audit import PartitionAudit
from mm2py.operations.audit.scope import STUCK_FETCHES, Clients, Pair
from mm2py.protocol.errors import CorruptBatchError, ProtocolError
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

__all__ = ["Progress", "compare"]

#: the most one fetch brings of one partition, and of all
PARTITION_FETCH_BYTES = 4 << 20
FETCH_BYTES = 32 << 20


@dataclass
class Progress:
    """Where the audit stands (handed to the progress callback after each round)."""

    partitions: int
    done: int = 0
    source_bytes: int = 0
    target_bytes: int = 0
    #: when the comparison started and (once it is over) ended, ``time.monotonic()``
    started: float = 0.0
    ended: float | None = None

    @property
    def seconds(self) -> float:
        return (time.monotonic() if self.ended is None else self.ended) - self.started


def _config(isolation: int) -> FetcherConfig:
    return FetcherConfig(isolation_level=isolation, max_wait_ms=0, max_bytes=FETCH_BYTES,
                         partition_max_bytes=PARTITION_FETCH_BYTES, retry_timeout_s=30.0)


async def compare(clients: Clients, audits: Mapping[Pair, PartitionAudit],
                  on_progress: Callable[[Progress], None] | None = None) -> Progress:
    """Read and compare until every audit is done; returns the totals."""
    isolation = clients.settings.fetcher.isolation_level
    source = RawFetcher(clients.source, _config(isolation))
    target = RawFetcher(clients.target, _config(isolation))
    progress = Progress(len(audits), started=time.monotonic())
    active = {p: a for p, a in audits.items() if not a.done}
    progress.done = len(audits) - len(active)
    stuck: dict[TopicPartition, tuple[int, int]] = {}  # (offset, fetches in a row) without data
    while active:
        walks = {p: a.walk for p, a in active.items() if a.walk is not None}
        want_s = {p.source: w.source.fetch_next for p, w in walks.items() if w.wants_source()}
        want_t = {p.target: w.target.fetch_next for p, w in walks.items() if w.wants_target()}
        got_s, got_t = await asyncio.gather(_fetch(source, want_s), _fetch(target, want_t))
        for pair, audit in list(active.items()):
            walk = audit.walk
            assert walk is not None
            had = walk.source.bytes_read, walk.target.bytes_read
            try:
                _feed(audit, got_s, pair.source, walk.add_source, stuck, "source")
                _feed(audit, got_t, pair.target, walk.add_target, stuck, "target")
                if audit.error is None:
                    walk.step()
            except ProtocolError as exc:  # a batch that does not decode: the partition stops here
                audit.fail(f"cannot read {pair.source} / {pair.target}: {exc}")
            progress.source_bytes += walk.source.bytes_read - had[0]
            progress.target_bytes += walk.target.bytes_read - had[1]
            if audit.done:
                del active[pair]
                progress.done += 1
        if not want_s and not want_t and active:
            for audit in active.values():  # nothing to fetch and not done: cannot happen
                audit.fail("the comparison stopped without reaching an end")
            break
        if not active:
            progress.ended = time.monotonic()
        if on_progress is not None:
            on_progress(progress)
    progress.ended = progress.ended or time.monotonic()
    return progress


#: one partition's fetch result, or why it could not be read
Fetched = FetchedPartition | str


async def _fetch(fetcher: RawFetcher, positions: dict[TopicPartition, int]) -> dict[TopicPartition, Fetched]:
    if not positions:
        return {}
    try:
        return dict(await fetcher.fetch(positions, sessions=False))
    except CorruptBatchError as exc:
        # a batch failing its CRC check on one partition: its reason, the others fetched again
        bad = exc.partition
        if bad is None or bad not in positions:
            raise
        out = await _fetch(fetcher, {tp: o for tp, o in positions.items() if tp != bad})
        out[bad] = f"corrupt batch: {exc}"
        return out


def _feed(audit: PartitionAudit, fetched: Mapping[TopicPartition, Fetched], tp: TopicPartition,
          add: Callable[[list[RecordBatch], int], None], stuck: dict[TopicPartition, tuple[int, int]],
          side: str) -> None:
    """Hand one side's fetch to its walk (or fail the partition with why it could not be read)."""
    f = fetched.get(tp)
    if f is None:
        return
    if isinstance(f, str) or not f.ok:
        reason = f if isinstance(f, str) else f.error_name
        audit.fail(f"{side} {tp} could not be read at the audit's position: {reason}")
        return
    add(f.batches, f.next_offset)
    if f.batches or f.next_offset > f.fetch_offset or f.starved or f.stalled:
        # progress, or a partition the broker had no room for in this response (it comes first
        # in a later one): not stuck
        stuck.pop(tp, None)
        return
    at, times = stuck.get(tp, (f.fetch_offset, 0))
    times = times + 1 if at == f.fetch_offset else 1
    stuck[tp] = (f.fetch_offset, times)
    if times >= STUCK_FETCHES:
        audit.fail(f"{side} {tp}: {times} fetches at offset {f.fetch_offset} brought nothing")
