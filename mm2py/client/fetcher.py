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
  Within an incremental fetch session (``FetcherConfig.sessions``, KIP-227) the broker reads the
  partitions in the session's order and moves each partition it served behind the others; a
  partition left waiting :data:`REORDER_AFTER_FETCHES` fetches in a row makes the next request a
  full one, naming it first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from mm2py.client.cluster import ClusterClient, topic_namer
from mm2py.client.connection import BrokerConnection
from mm2py.protocol.api import (
    AbortedTransaction,
    ApiKey,
    FetchPartitionRequest,
    FetchPartitionResponse,
    FetchResponse,
    FetchTopicRequest,
    ForgottenTopic,
    decode_fetch_response,
    encode_fetch_request,
)
from mm2py.protocol.api_fetch import FIRST_TOPIC_ID_VERSION, READ_COMMITTED
from mm2py.protocol.batch_edit import crop
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.errors_codes import NONE, error_name
from mm2py.protocol.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    NO_SESSION,
    FetchSession,
    Params,
    SessionRequest,
    changed_keys,
)
from mm2py.protocol.native import CONTROL_SEEN, OUT_OF_ORDER
from mm2py.protocol.records import RecordBatch, split_checked, split_record_set
from mm2py.protocol.transactions import AbortedTransactionFilter
from mm2py.protocol.types import TopicPartition

PROTOCOL_MIN_FETCH_VERSION = 4
FIRST_SESSION_VERSION = 7

log = logging.getLogger(__name__)

#: a TopicPartition's topic, as a C-level function (maps over thousands of partitions per fetch)
_topic = itemgetter(0)


@dataclass(frozen=True)
class FetcherConfig:
    isolation_level: int = READ_COMMITTED
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 50 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    #: total time spent retrying routing errors within one fetch() call
    retry_timeout_s: float = 10.0
    #: incremental fetch sessions (KIP-227); for fetchers that fetch the same partitions again and
    #: again (a one-off read would leave a session behind on the broker until it is evicted)
    sessions: bool = False


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


#: a partition left without data for this many fetches in a row makes the next request of its fetch
#: session a full one, naming it first (an incremental request cannot change the order in which the
#: broker reads the partitions; the broker itself moves partitions it served behind the others)
REORDER_AFTER_FETCHES = 3


class RawFetcher:
    """Fetches for a set of positions. With ``config.sessions``, one incremental fetch session
    (KIP-227) per source broker: a fetch's request names only the partitions whose position moved,
    and its response only the partitions with news; a partition absent from the result has none."""

    def __init__(self, cluster: ClusterClient, config: FetcherConfig | None = None) -> None:
        self.cluster = cluster
        self.config = config or FetcherConfig()
        self._waiting = WaitingPartitions()
        #: one fetch session per broker (node id); guards the broker's view of our positions
        self.sessions: dict[int, FetchSession] = {}
        #: per broker: (metadata generation, positions, parameters) of the last request (_wanted)
        self._last: dict[int, tuple[int, dict[TopicPartition, int], dict[TopicPartition, Params]]] = {}

    async def fetch(
        self,
        positions: Mapping[TopicPartition, int],
        *,
        partition_max_bytes: Mapping[TopicPartition, int] | None = None,
        sessions: bool = True,
    ) -> dict[TopicPartition, FetchedPartition]:
        """One fetch for ``positions`` ({tp: next offset}); one request per leader.
        ``sessions=False``: sessionless requests this time (a one-off read of a few partitions
        would otherwise make the session forget all the others)."""
        cfg = self.config
        incremental = cfg.sessions and sessions
        limits = partition_max_bytes or {}

        async def send(
            conn: BrokerConnection, batch: dict[TopicPartition, int]
        ) -> dict[TopicPartition, FetchedPartition]:
            ids = {t: self.cluster.topic_id(t) for t in set(map(_topic, batch))}
            cap = None if all(ids.values()) else FIRST_TOPIC_ID_VERSION - 1
            version = self.cluster.version_for(conn, ApiKey.FETCH, cap)
            session = self._session(conn.node_id, version) if incremental else None
            if session is None:
                # waiting partitions first: the broker returns the first batch whole even if too big
                order = self._waiting.order(batch)
                send = [(tp, self._params(tp, batch[tp], limits)) for tp in order]
                body = self._encode(version, ids, send, [], {}, NO_SESSION, FINAL_EPOCH)
                resp = await self._request(conn, version, body)
                return self._results(resp, ids, batch)
            for _ in range(2):  # a session error makes the next request a full one: send it now
                wanted = self._wanted(conn.node_id, batch, limits)
                full = self._waiting.longest(batch) >= REORDER_AFTER_FETCHES
                if full or session.epoch == INITIAL_EPOCH:
                    wanted = {tp: wanted[tp] for tp in self._waiting.order(batch)}
                req = session.request(wanted, ids, by_id=version >= FIRST_TOPIC_ID_VERSION, full=full)
                body = self._encode(version, ids, req.send, req.forget, session.topic_ids,
                                    req.session_id, req.epoch)
                try:
                    resp = await self._request(conn, version, body)
                except BaseException:
                    session.failed()
                    raise
                if session.answered(resp.error_code, resp.session_id):
                    return self._results(resp, ids, batch)
                log.info("fetch session with broker %d: %s; starting a new one",
                         conn.node_id, error_name(resp.error_code))
            return {}  # twice refused: nothing this time, the next fetch starts afresh

        return await self.cluster.for_leaders(
            positions, send, lambda r: r.error_code, timeout=cfg.retry_timeout_s,
            quiet_absent=incremental,
        )

    def _session(self, node_id: int, version: int) -> FetchSession | None:
        if version < FIRST_SESSION_VERSION:
            return None
        session = self.sessions.get(node_id)
        if session is None:
            session = self.sessions[node_id] = FetchSession()
        return None if session.busy else session  # one request of a session at a time

    def _wanted(
        self, node: int, batch: dict[TopicPartition, int], limits: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, Params]:
        """Each partition's fetch parameters. Between two requests to a broker only a few positions
        move: the last request's parameters are kept, and while the partitions and the metadata
        (the leader epochs) are the same, only the moved ones are computed again."""
        kept = self._last.get(node)
        generation = self.cluster.generation
        moved = None
        if kept is not None and not limits and kept[0] == generation:
            moved = changed_keys(batch, kept[1])
        if kept is None or moved is None:
            params = {tp: self._params(tp, o, limits) for tp, o in batch.items()}
        else:
            params = dict(kept[2])
            size = self.config.partition_max_bytes
            for tp in moved:
                params[tp] = (batch[tp], size, params[tp][2])
        if not limits:
            self._last[node] = (generation, dict(batch), params)
        return params

    def _params(self, tp: TopicPartition, offset: int, limits: Mapping[TopicPartition, int]) -> Params:
        return (offset, limits.get(tp, self.config.partition_max_bytes), self.cluster.leader_epoch_of(tp))

    def _encode(
        self, version: int, ids: Mapping[str, uuid.UUID | None], send: list[tuple[TopicPartition, Params]],
        forget: list[TopicPartition], forget_ids: Mapping[str, uuid.UUID | None], session_id: int,
        epoch: int,
    ) -> bytes:
        cfg = self.config
        by_topic: dict[str, list[FetchPartitionRequest]] = {}
        for tp, (offset, max_bytes, leader_epoch) in send:
            by_topic.setdefault(tp.topic, []).append(
                FetchPartitionRequest(tp.partition, offset, max_bytes, current_leader_epoch=leader_epoch))
        gone: dict[str, list[int]] = {}
        for tp in forget:
            gone.setdefault(tp.topic, []).append(tp.partition)
        return encode_fetch_request(
            version,
            [FetchTopicRequest(t, parts, ids[t]) for t, parts in by_topic.items()],
            max_wait_ms=cfg.max_wait_ms,
            min_bytes=cfg.min_bytes,
            max_bytes=cfg.max_bytes,
            isolation_level=cfg.isolation_level,
            session_id=session_id,
            session_epoch=epoch,
            forgotten=[ForgottenTopic(t, parts, forget_ids.get(t)) for t, parts in gone.items()],
        )

    async def _request(self, conn: BrokerConnection, version: int, body: bytes) -> FetchResponse:
        timeout = conn.config.request_timeout_s + self.config.max_wait_ms / 1000
        return await conn.request(ApiKey.FETCH, version, body, decode_fetch_response, timeout)

    def _results(
        self, resp: FetchResponse, ids: Mapping[str, uuid.UUID | None], batch: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, FetchedPartition]:
        read_committed = self.config.isolation_level == READ_COMMITTED
        name_of = topic_namer(ids)
        out: dict[TopicPartition, FetchedPartition] = {}
        for p in resp.partitions:
            name = name_of(p.topic, p.topic_id)
            if name is None:
                continue
            tp = TopicPartition(name, p.partition)
            if tp in batch:
                try:
                    fetched = process_partition(tp, batch[tp], p, read_committed)
                except CorruptBatchError as exc:
                    exc.partition = tp
                    raise
                self._waiting.note(fetched)
                out[tp] = fetched
        return out

    def close_sessions(self) -> list[tuple[int, SessionRequest]]:
        """Forget every fetch session; returns the requests that close them on their brokers."""
        out = [(node, req) for node, s in self.sessions.items() if (req := s.close()) is not None]
        self.sessions.clear()
        return out

    async def close(self, timeout: float = 2.0) -> None:
        """Close the fetch sessions on their brokers (best effort: a broker evicts them anyway)."""
        for node, req in self.close_sessions():
            with contextlib.suppress(Exception):
                conn = await asyncio.wait_for(self.cluster.connection(node), timeout)
                version = self.cluster.version_for(conn, ApiKey.FETCH)
                body = encode_fetch_request(version, [], max_wait_ms=0, session_id=req.session_id,
                                            session_epoch=req.epoch)
                await conn.request(ApiKey.FETCH, version, body, decode_fetch_response, timeout)
