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
from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter

from mm2py.client.cluster import ClusterClient, topic_namer
from mm2py.client.connection import BrokerConnection
from mm2py.client.fetched import FetchedPartition, WaitingPartitions, process_partition
from mm2py.protocol.api import (
    ApiKey,
    FetchPartitionRequest,
    FetchResponse,
    FetchTopicRequest,
    ForgottenTopic,
    decode_fetch_response,
    encode_fetch_request,
)
from mm2py.protocol.api_fetch import FIRST_TOPIC_ID_VERSION, READ_COMMITTED
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.errors_codes import error_name
from mm2py.protocol.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    NO_SESSION,
    FetchSession,
    Params,
    SessionRequest,
    changed_keys,
)
from mm2py.protocol.types import TopicPartition

PROTOCOL_MIN_FETCH_VERSION = 4
FIRST_SESSION_VERSION = 7

log = logging.getLogger(__name__)

#: (the last request's parameters, the partitions whose parameters differ from them)
Moved = tuple[dict[TopicPartition, "Params"], list[TopicPartition]]

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
        #: per broker: (metadata generation, positions, size limits, parameters) of the last
        #: request (_wanted)
        self._last: dict[int, tuple[int, dict[TopicPartition, int], dict[TopicPartition, int],
                                    dict[TopicPartition, Params]]] = {}
        #: per broker: (metadata generation, partitions, topic ids) of the last request (_topic_ids)
        self._ids: dict[int, tuple[int, list[TopicPartition], dict[str, uuid.UUID | None]]] = {}

    async def fetch(
        self,
        positions: Mapping[TopicPartition, int],
        *,
        partition_max_bytes: Mapping[TopicPartition, int] | None = None,
        sessions: bool = True,
    ) -> dict[TopicPartition, FetchedPartition]:
        """One fetch for ``positions`` ({tp: next offset}); one request per leader.
        ``partition_max_bytes``: the partitions whose size limit is not the configured one; a
        partition limited to 0 stays in the session but is not read (its result is left out).
        ``sessions=False``: sessionless requests this time (a one-off read of a few partitions
        would otherwise make the session forget all the others)."""
        cfg = self.config
        incremental = cfg.sessions and sessions
        limits = partition_max_bytes or {}

        async def send(
            conn: BrokerConnection, batch: dict[TopicPartition, int]
        ) -> dict[TopicPartition, FetchedPartition]:
            ids = self._topic_ids(conn.node_id, batch) if incremental else self._ids_of(batch)
            cap = None if all(ids.values()) else FIRST_TOPIC_ID_VERSION - 1
            version = self.cluster.version_for(conn, ApiKey.FETCH, cap)
            session = self._session(conn.node_id, version) if incremental else None
            if session is None:
                # waiting partitions first: the broker returns the first batch whole even if too big
                order = self._waiting.order(batch)
                send = [(tp, self._params(tp, batch[tp], limits)) for tp in order]
                body = self._encode(version, ids, send, [], {}, NO_SESSION, FINAL_EPOCH)
                resp = await self._request(conn, version, body)
                return self._results(resp, ids, batch, limits)
            for _ in range(2):  # a session error makes the next request a full one: send it now
                wanted, moved = self._wanted(conn.node_id, batch, limits)
                full = self._waiting.longest(batch) >= REORDER_AFTER_FETCHES
                if full or session.epoch == INITIAL_EPOCH:
                    wanted = {tp: wanted[tp] for tp in self._waiting.order(batch)}
                    moved = None
                req = session.request(wanted, ids, by_id=version >= FIRST_TOPIC_ID_VERSION, full=full,
                                      moved=moved)
                body = self._encode(version, ids, req.send, req.forget, session.topic_ids,
                                    req.session_id, req.epoch)
                try:
                    resp = await self._request(conn, version, body)
                except BaseException:
                    session.failed()
                    raise
                if session.answered(resp.error_code, resp.session_id):
                    return self._results(resp, ids, batch, limits)
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
    ) -> tuple[dict[TopicPartition, Params], Moved | None]:
        """Each partition's fetch parameters, and (the last request's parameters, the partitions
        whose parameters differ from them) when both name the same partitions in the same order.
        Between two requests to a broker only a few positions and limits move: the last request's
        parameters are kept, and while the partitions and the metadata (the leader epochs) are the
        same, only the moved ones are computed again."""
        kept = self._last.get(node)
        generation = self.cluster.generation
        moved = None
        if kept is not None and kept[0] == generation:
            moved = changed_keys(batch, kept[1])
            if moved is not None and (limits or kept[2]):  # and the partitions whose limit changed
                before = kept[2]
                limited = [tp for tp in limits.keys() ^ before.keys() if tp in batch]
                limited += [tp for tp, n in limits.items() if before.get(tp, n) != n]
                moved = list(dict.fromkeys(moved + limited)) if limited else moved
        if kept is None or moved is None:
            params = {tp: self._params(tp, o, limits) for tp, o in batch.items()}
        else:
            params = dict(kept[3])
            size = self.config.partition_max_bytes
            for tp in moved:
                params[tp] = (batch[tp], limits.get(tp, size), params[tp][2])
        self._last[node] = (generation, dict(batch), dict(limits), params)
        return params, ((kept[3], moved) if kept is not None and moved is not None else None)

    def _ids_of(self, batch: Mapping[TopicPartition, int]) -> dict[str, uuid.UUID | None]:
        return {t: self.cluster.topic_id(t) for t in set(map(_topic, batch))}

    def _topic_ids(self, node: int, batch: Mapping[TopicPartition, int]) -> dict[str, uuid.UUID | None]:
        """The topic ids of ``batch``'s topics; the last request's to ``node`` while it named the
        same partitions in the same order under the same metadata (checked without hashing them)."""
        kept = self._ids.get(node)
        generation = self.cluster.generation
        if kept is not None and kept[0] == generation and len(kept[1]) == len(batch) and (
                list(batch) == kept[1]):
            return kept[2]
        ids = self._ids_of(batch)
        self._ids[node] = (generation, list(batch), ids)
        return ids

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
        self, resp: FetchResponse, ids: Mapping[str, uuid.UUID | None], batch: Mapping[TopicPartition, int],
        limits: Mapping[TopicPartition, int],
    ) -> dict[TopicPartition, FetchedPartition]:
        read_committed = self.config.isolation_level == READ_COMMITTED
        name_of = topic_namer(ids)
        out: dict[TopicPartition, FetchedPartition] = {}
        for p in resp.partitions:
            name = name_of(p.topic, p.topic_id)
            if name is None:
                continue
            tp = TopicPartition(name, p.partition)
            if tp in batch and (not limits or limits.get(tp) != 0):  # a partition at 0 is not read
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
