"""Cluster view: bootstrap, metadata cache, leader routing, retries with backoff, ListOffsets.

:class:`ClusterClient` owns the :class:`BrokerConnection` s to the brokers (one per broker, and
more for a caller that asks for other slots, see ``connection``). ``for_leaders`` is the
shared routing/retry engine used by ListOffsets, the fetcher and the producer: it groups work per
partition leader, sends one request per broker concurrently, and re-routes partitions that failed
with a retriable error (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
connection loss, request timeout, ...) after refreshing metadata, with exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mm2py.client.connection import BrokerConnection, ConnectionConfig, ConnectionFactory
from mm2py.client.errors import ClientError, ConnectionLostError, NoLeaderError, is_retriable_error
from mm2py.client.routes import LeaderRoutes
from mm2py.protocol.api import (
    ApiKey,
    BrokerMetadata,
    ListOffsetsPartitionResponse,
    MetadataPartition,
    MetadataResponse,
    decode_list_offsets_response,
    decode_metadata_response,
    encode_list_offsets_request,
    encode_metadata_request,
)
from mm2py.protocol.errors_codes import NONE, BrokerError, error_info
from mm2py.protocol.types import TopicPartition
from mm2py.retry import Backoff

log = logging.getLogger(__name__)
X = TypeVar("X")
R = TypeVar("R")

LATEST = -1
EARLIEST = -2


@dataclass(frozen=True)
class ClientConfig:
    connection: ConnectionConfig = field(default_factory=ConnectionConfig)
    retry_backoff_s: float = 0.05
    retry_backoff_max_s: float = 2.0
    retry_timeout_s: float = 30.0
    #: optional per-API version caps (e.g. {ApiKey.FETCH: 12}); negotiation never exceeds them
    max_versions: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID | None
    partitions: dict[int, MetadataPartition]
    is_internal: bool = False


@dataclass
class _Attempt:
    """What one pass of ``for_leaders`` leaves to retry: partitions, topics to refresh, last cause."""

    retry: set[TopicPartition] = field(default_factory=set)
    stale_topics: set[str] = field(default_factory=set)
    last_exc: BaseException | None = None

    def retry_later(self, tp: TopicPartition, cause: BaseException, *, stale: bool = False) -> None:
        self.retry.add(tp)
        self.last_exc = cause
        if stale:
            self.stale_topics.add(tp.topic)


def deadline_backoff(first: float, maximum: float, timeout: float) -> Backoff:
    """A doubling back-off from ``first`` to ``maximum`` that runs out ``timeout`` seconds from now."""
    return Backoff(first, maximum, timeout=timeout, since=time.monotonic())


def backoff_expired(backoff: Backoff) -> bool:
    """Whether ``backoff``'s time is up (by the monotonic clock)."""
    return backoff.expired(time.monotonic())


async def back_off(backoff: Backoff) -> None:
    """Wait ``backoff``'s next delay, no longer than the time it has left."""
    await asyncio.sleep(min(backoff.next_delay(), max(0.0, backoff.left(time.monotonic()))))


def _parse_bootstrap(bootstrap: str | Iterable[str]) -> list[tuple[str, int]]:
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out = []
    for item in items:
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bad bootstrap address {item!r} (expected host:port)")
        out.append((host.strip("[]"), int(port)))
    return out


def topic_namer(ids: Mapping[str, uuid.UUID | None]) -> Callable[[str | None, uuid.UUID | None], str | None]:
    """Names the topic of a response entry that carries a name (old versions) or an id (v13+)."""
    names = {v: k for k, v in ids.items() if v is not None}

    def name_of(topic: str | None, topic_id: uuid.UUID | None) -> str | None:
        if topic is None and topic_id is not None:
            return names.get(topic_id)
        return topic

    return name_of


class ClusterClient:
    def __init__(self, bootstrap: str | Iterable[str], config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self._bootstrap = _parse_bootstrap(bootstrap)
        self._factory = ConnectionFactory(self.config.connection)
        self._conns: dict[tuple[int, int], BrokerConnection] = {}  # (node id, slot) -> connection
        self._bootstrap_conn: BrokerConnection | None = None
        self._conn_lock = asyncio.Lock()
        self._metadata_lock = asyncio.Lock()
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.generation = 0  # counts the changes of the metadata; guards :attr:`routes`
        self.routes = LeaderRoutes(self.leader_of)
        self.cluster_id: str | None = None

    # ------------------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        await self.refresh_metadata([])

    async def close(self) -> None:
        conns = list(self._conns.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._conns.clear()
        self._bootstrap_conn = None
        for c in conns:
            await c.close()

    async def __aenter__(self) -> ClusterClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---------------------------------------------------------------------------- connections
    def version_for(self, conn: BrokerConnection, api_key: int, max_version: int | None = None) -> int:
        cap = self.config.max_versions.get(api_key)
        if max_version is not None:
            cap = max_version if cap is None else min(cap, max_version)
        return conn.version_for(api_key, cap)

    async def connection(self, node_id: int, slot: int = 0) -> BrokerConnection:
        """Connection ``slot`` to broker ``node_id`` (opened if need be). A broker answers a
        connection's requests one after another, in order; different slots' at the same time."""
        key = (node_id, slot)
        conn = self._conns.get(key)
        if conn is not None and conn.connected:
            return conn
        async with self._conn_lock:
            conn = self._conns.get(key)
            if conn is not None and conn.connected:
                return conn
            broker = self.brokers.get(node_id)
            if broker is None:
                raise NoLeaderError(f"broker {node_id} unknown to metadata")
            conn = await self._factory.connect(broker.host, broker.port, node_id)
            self._conns[key] = conn
            return conn

    async def any_connection(self) -> BrokerConnection:
        """A live connection to some broker (known brokers first, then the bootstrap list)."""
        for (_, slot), conn in self._conns.items():
            if slot == 0 and conn.connected:
                return conn
        last: BaseException | None = None
        for node_id in list(self.brokers):
            try:
                return await self.connection(node_id)
            except ClientError as e:
                last = e
        if self._bootstrap_conn is not None and self._bootstrap_conn.connected:
            return self._bootstrap_conn
        for host, port in self._bootstrap:
            try:
                self._bootstrap_conn = await self._factory.connect(host, port)
                return self._bootstrap_conn
            except ClientError as e:
                last = e
        raise ConnectionLostError(f"no broker reachable (bootstrap {self._bootstrap}): {last!r}")

    # ------------------------------------------------------------------------------- metadata
    async def refresh_metadata(self, topics: Iterable[str] | None = None) -> MetadataResponse:
        """Fetch metadata (``None`` = all topics, ``[]`` = brokers only) and update the cache."""
        wanted = None if topics is None else sorted(set(topics))
        backoff = self._backoff()
        async with self._metadata_lock:
            while True:
                try:
                    conn = await self.any_connection()
                    version = self.version_for(conn, ApiKey.METADATA)
                    resp = await conn.request(
                        ApiKey.METADATA,
                        version,
                        encode_metadata_request(version, wanted),
                        decode_metadata_response,
                    )
                    break
                except ClientError as e:
                    if not e.retriable or backoff_expired(backoff):
                        raise
                    log.debug("metadata request failed (%r), retrying", e)
                    await back_off(backoff)
        self._apply_metadata(resp, wanted)
        return resp

    def _apply_metadata(self, resp: MetadataResponse, wanted: list[str] | None) -> None:
        self.generation += 1
        if resp.brokers:
            self.brokers = dict(resp.brokers)
        self.cluster_id = resp.cluster_id
        for stale in [key for key in self._conns if key[0] not in self.brokers]:
            conn = self._conns.pop(stale)
            asyncio.get_running_loop().create_task(conn.close())
        seen = set()
        for t in resp.topics:
            if t.name is None:
                continue
            seen.add(t.name)
            if t.error_code != NONE:
                self.topics.pop(t.name, None)
                continue
            parts = {p.partition: p for p in t.partitions}
            self.topics[t.name] = TopicMetadata(t.name, t.topic_id, parts, t.is_internal)
        if wanted is None:
            for name in [n for n in self.topics if n not in seen]:
                del self.topics[name]

    def invalidate(self, topics: Iterable[str]) -> None:
        for t in topics:
            if self.topics.pop(t, None) is not None:
                self.generation += 1

    async def ensure_topics(self, topics: Iterable[str]) -> None:
        missing = [t for t in set(topics) if t not in self.topics]
        if missing:
            await self.refresh_metadata(missing)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        meta = self.topics.get(topic)
        return None if meta is None else meta.topic_id

    def partitions_for(self, topic: str) -> list[int]:
        meta = self.topics.get(topic)
        return [] if meta is None else sorted(meta.partitions)

    def leader_of(self, tp: TopicPartition) -> int | None:
        meta = self.topics.get(tp.topic)
        part = None if meta is None else meta.partitions.get(tp.partition)
        return None if part is None or part.leader_id < 0 else part.leader_id

    def leader_epoch_of(self, tp: TopicPartition) -> int:
        meta = self.topics.get(tp.topic)
        part = None if meta is None else meta.partitions.get(tp.partition)
        return -1 if part is None else part.leader_epoch

    # ---------------------------------------------------------------------- routing + retries
    def _backoff(self, timeout: float | None = None) -> Backoff:
        c = self.config
        return deadline_backoff(c.retry_backoff_s, c.retry_backoff_max_s, timeout or c.retry_timeout_s)

    async def for_leaders(
        self,
        items: Mapping[TopicPartition, X],
        send: Callable[[BrokerConnection, dict[TopicPartition, X]], Awaitable[dict[TopicPartition, R]]],
        error_of: Callable[[R], int],
        *,
        timeout: float | None = None,
        partial: bool = False,
        quiet_absent: bool = False,
    ) -> dict[TopicPartition, R]:
        """Send ``items`` to their leaders (one ``send`` per broker, concurrently) and retry the
        partitions whose result carries a retriable error code or whose broker failed, until the
        retry timeout. Results with non-retriable error codes are returned as they are. When the
        timeout expires, partitions with a result keep their last (failed) result; if one has none,
        the last exception is raised (with ``partial``, it is left out instead). A partition for
        which ``send`` returns no result is retried too, unless ``quiet_absent`` (an incremental
        fetch leaves out the partitions without news)."""
        remaining = dict(items)
        results: dict[TopicPartition, R] = {}
        backoff = self._backoff(timeout)
        while remaining:
            attempt = await self._send_once(remaining, send, error_of, results, quiet_absent)
            if not attempt.retry:
                break
            remaining = {tp: x for tp, x in remaining.items() if tp in attempt.retry}
            if backoff_expired(backoff):
                if partial or all(tp in results for tp in remaining):
                    break
                assert attempt.last_exc is not None
                raise attempt.last_exc
            log.debug("retrying %d partitions (%r)", len(remaining), attempt.last_exc)
            await back_off(backoff)
            if attempt.stale_topics:
                self.invalidate(attempt.stale_topics)
                with contextlib.suppress(ClientError):
                    await self.refresh_metadata(attempt.stale_topics)
        return results

    async def _send_once(
        self,
        items: Mapping[TopicPartition, X],
        send: Callable[[BrokerConnection, dict[TopicPartition, X]], Awaitable[dict[TopicPartition, R]]],
        error_of: Callable[[R], int],
        results: dict[TopicPartition, R],
        quiet_absent: bool = False,
    ) -> _Attempt:
        """One pass of ``for_leaders``: results go into ``results``; says what to retry and why."""
        groups, leaderless = self.routes.group(items, self.generation)
        if leaderless:  # topics not in the metadata yet, or partitions without a leader
            await self.ensure_topics({tp.topic for tp in leaderless})
            groups, leaderless = self.routes.group(items, self.generation)
        attempt = _Attempt()
        for tp in leaderless:
            attempt.retry_later(tp, NoLeaderError(f"no leader known for {tp}"), stale=True)

        async def to_leader(node: int, batch: dict[TopicPartition, X]) -> dict[TopicPartition, R]:
            return await send(await self.connection(node), batch)

        calls = [to_leader(n, b) for n, b in groups.items()]
        try:  # one leader, the usual case, is awaited at once: no task and gather per request
            outcomes: list[Any] = ([await calls[0]] if len(calls) == 1
                                   else await asyncio.gather(*calls, return_exceptions=True))
        except Exception as exc:  # only that single call raises; gather would have returned it
            outcomes = [exc]
        for batch, outcome in zip(groups.values(), outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not is_retriable_error(outcome):
                    raise outcome
                for tp in batch:
                    attempt.retry_later(tp, outcome, stale=True)
                continue
            if not quiet_absent:
                for tp in batch:
                    if tp not in outcome:
                        attempt.retry_later(tp, ClientError(f"broker sent no result for {tp}"))
            for tp, res in outcome.items():
                results[tp] = res
                info = error_info(error_of(res))
                if info.code != NONE and info.retriable:
                    attempt.retry_later(tp, BrokerError(info.code, str(tp)), stale=info.invalidates_metadata)
        return attempt

    # ------------------------------------------------------------------------------ ListOffsets
    async def list_offsets(
        self,
        tps: Iterable[TopicPartition],
        timestamp: int | Mapping[TopicPartition, int] = LATEST,
        *,
        isolation_level: int = 0,
        partial_after: float | None = None,
    ) -> dict[TopicPartition, int]:
        """Offsets for ``timestamp`` (-1 latest, -2 earliest, or a ms timestamp: first offset
        whose timestamp is >= it, -1 if none). Raises BrokerError on non-retriable errors; with
        ``partial_after`` (s), partitions still failing retriably then (no leader yet) are left out."""
        items = {tp: (timestamp[tp] if isinstance(timestamp, Mapping) else timestamp) for tp in set(tps)}

        async def send(
            conn: BrokerConnection, batch: dict[TopicPartition, int]
        ) -> dict[TopicPartition, ListOffsetsPartitionResponse]:
            version = self.version_for(conn, ApiKey.LIST_OFFSETS)
            by_topic: dict[str, list[tuple[int, int]]] = {}
            for tp, ts in batch.items():
                by_topic.setdefault(tp.topic, []).append((tp.partition, ts))
            body = encode_list_offsets_request(version, list(by_topic.items()), isolation_level)
            resp = await conn.request(ApiKey.LIST_OFFSETS, version, body, decode_list_offsets_response)
            return {TopicPartition(r.topic, r.partition): r for r in resp}

        partial = partial_after is not None
        results = await self.for_leaders(items, send, lambda r: r.error_code, timeout=partial_after,
                                         partial=partial)
        out: dict[TopicPartition, int] = {}
        for tp, r in results.items():
            if r.error_code != NONE:
                if partial and error_info(r.error_code).retriable:
                    continue
                raise BrokerError(r.error_code, f"ListOffsets {tp}")
            out[tp] = r.offset
        return out
