"""Raw fetcher: Fetch requests to partition leaders, returning verified, complete RecordBatches.

Per partition the fetcher (all per batch, never per record on the common path):

* verifies the CRC-32C of every complete batch it looks at (``CorruptBatchError`` otherwise, so a
  corrupt batch is never returned);
* drops the truncated trailing batch, and whole batches that end before the requested offset;
* crops the first batch when it starts before the requested offset (record-level rewrite, only
  needed when a fetch starts mid-batch);
* under read_committed applies :class:`AbortedTransactionFilter`; control batches are never
  returned (in either isolation level: no producer may write them);
* reports errors such as OFFSET_OUT_OF_RANGE in :class:`FetchedPartition` (the caller picks a
  reset policy); retriable routing errors are retried inside :meth:`RawFetcher.fetch`;
* puts first in its next request every partition the broker left without a batch although it has
  data there (:attr:`FetchedPartition.stalled`, :attr:`FetchedPartition.starved`), longest-waiting
  first: only the first partition of a request is granted "at least one batch" beyond the size
  limits, and a tiered-storage (KIP-405) broker reads remote data for one partition per request and
  answers for a remote batch larger than the partition limit with nothing at all unless it is first.
  Without that rotation a partition behind others that always have data could wait forever.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from mm2py.client.cluster import ClusterClient, topic_namer
from mm2py.client.connection import BrokerConnection
from mm2py.protocol.api import (
    AbortedTransaction,
    ApiKey,
    FetchPartitionRequest,
    FetchPartitionResponse,
    FetchTopicRequest,
    decode_fetch_response,
    encode_fetch_request,
)
from mm2py.protocol.api_fetch import FIRST_TOPIC_ID_VERSION, READ_COMMITTED
from mm2py.protocol.batch_edit import crop
from mm2py.protocol.errors_codes import NONE, error_name
from mm2py.protocol.native import CONTROL_SEEN, OUT_OF_ORDER
from mm2py.protocol.records import RecordBatch, split_checked, split_record_set
from mm2py.protocol.transactions import AbortedTransactionFilter
from mm2py.protocol.types import TopicPartition

PROTOCOL_MIN_FETCH_VERSION = 4


@dataclass(frozen=True)
class FetcherConfig:
    isolation_level: int = READ_COMMITTED
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 50 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    #: total time spent retrying routing errors within one fetch() call
    retry_timeout_s: float = 10.0


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
    for the most consecutive rounds first, ties and the rest in the caller's order. A partition
    served is back to the end, so partitions waiting together take turns at the front."""

    def __init__(self) -> None:
        self.rounds: dict[TopicPartition, int] = {}

    def order(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        return sorted(partitions, key=lambda tp: -self.rounds.get(tp, 0))

    def note(self, fetched: FetchedPartition) -> None:
        if fetched.stalled or fetched.starved:
            self.rounds[fetched.tp] = self.rounds.get(fetched.tp, 0) + 1
        else:
            self.rounds.pop(fetched.tp, None)


class RawFetcher:
    def __init__(self, cluster: ClusterClient, config: FetcherConfig | None = None) -> None:
        self.cluster = cluster
        self.config = config or FetcherConfig()
        self._waiting = WaitingPartitions()

    async def fetch(
        self,
        positions: Mapping[TopicPartition, int],
        *,
        partition_max_bytes: Mapping[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, FetchedPartition]:
        """One fetch round for ``positions`` ({tp: next offset}); one request per leader."""
        cfg = self.config
        read_committed = cfg.isolation_level == READ_COMMITTED
        limits = partition_max_bytes or {}

        async def send(
            conn: BrokerConnection, batch: dict[TopicPartition, int]
        ) -> dict[TopicPartition, FetchedPartition]:
            topics = {tp.topic for tp in batch}
            ids = {t: self.cluster.topic_id(t) for t in topics}
            cap = None if all(ids.values()) else FIRST_TOPIC_ID_VERSION - 1
            version = self.cluster.version_for(conn, ApiKey.FETCH, cap)
            by_topic: dict[str, list[FetchPartitionRequest]] = {}
            # Waiting partitions first: the broker returns the first batch whole even if too big.
            for tp in self._waiting.order(batch):
                by_topic.setdefault(tp.topic, []).append(
                    FetchPartitionRequest(
                        tp.partition,
                        batch[tp],
                        limits.get(tp, cfg.partition_max_bytes),
                        current_leader_epoch=self.cluster.leader_epoch_of(tp),
                    )
                )
            body = encode_fetch_request(
                version,
                [FetchTopicRequest(t, parts, ids[t]) for t, parts in by_topic.items()],
                max_wait_ms=cfg.max_wait_ms,
                min_bytes=cfg.min_bytes,
                max_bytes=cfg.max_bytes,
                isolation_level=cfg.isolation_level,
            )
            timeout = conn.config.request_timeout_s + cfg.max_wait_ms / 1000
            resp = await conn.request(ApiKey.FETCH, version, body, decode_fetch_response, timeout)
            name_of = topic_namer(ids)
            out: dict[TopicPartition, FetchedPartition] = {}
            for p in resp.partitions:
                name = name_of(p.topic, p.topic_id)
                if name is None:
                    continue
                tp = TopicPartition(name, p.partition)
                if tp in batch:
                    fetched = process_partition(tp, batch[tp], p, read_committed)
                    self._waiting.note(fetched)
                    out[tp] = fetched
            return out

        return await self.cluster.for_leaders(
            positions, send, lambda r: r.error_code, timeout=cfg.retry_timeout_s
        )
