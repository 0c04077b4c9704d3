"""MirrorSource: the fetch side of a mirror task (raw record batches from source leaders).

Wraps :class:`mm2py.client.fetcher.RawFetcher`: it hands the task complete, CRC-verified batches,
the first one cropped to the requested offset, aborted transactions and control batches removed
(read_committed), and says where the next fetch starts. A batch that fails its CRC is never passed
on: the fetch is retried, and after ``corrupt_retries`` attempts the task fails with the position
unchanged, so nothing is skipped.

A topic whose id changes under the task (deleted and created again, perhaps already as long as the
old one) is reported as re-created, with the new topic's start (``Polled.recreated``): the task's
alarm (``mm2py/engine/losses.py``) decides whether it goes on from there. The ids the task's stored
positions were written with (``expect_topic_ids``) count as first seen, so a topic created again
while no task mirrored it is reported the same way at the first poll. Each ``Polled`` says which
topic id its batches come from, stored with the position.

A partition whose fetch returns an error (other than OFFSET_OUT_OF_RANGE, which resets it) is left
out of the next fetches for a while, doubling up to ``error_backoff[1]`` seconds while the error
lasts: a broker answers such a fetch at once (e.g. UNKNOWN_SERVER_ERROR when reading remote,
tiered storage fails), which would otherwise turn the task's fetch loop into a busy loop, while the
other partitions keep being fetched as usual.

With a ``member`` of a :class:`~mm2py.client.fetch_hub.FetchHub` (the in-process worker's tasks of
one flow) its polls go through the hub's one fetch session per source broker, paced there per
broker; the cluster client is the hub's, and closing the source leaves the hub.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from mm2py.client.cluster import EARLIEST, LATEST, ClusterClient
from mm2py.client.errors import ClientError
from mm2py.client.fetch_hub import HubMember, Linger
from mm2py.client.fetched import fetched_bytes
from mm2py.client.fetcher import FetchedPartition, FetcherConfig, RawFetcher
from mm2py.client.linger import CORRUPT_BACKOFF, UNAVAILABLE_BACKOFF
from mm2py.engine.task_contract import START_LOOKUP_SECONDS, Polled, TaskError
from mm2py.protocol.connect_offsets import topic_id_text
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.errors_codes import OFFSET_OUT_OF_RANGE, BrokerError
from mm2py.protocol.types import TopicPartition
from mm2py.retry import Backoff

__all__ = ["Linger", "MirrorSource", "SourceError"]

log = logging.getLogger(__name__)


class SourceError(TaskError):
    """The source cluster answered with an error the task cannot recover from."""


class MirrorSource:
    def __init__(
        self,
        cluster: ClusterClient,
        config: FetcherConfig | None = None,
        *,
        corrupt_retries: int = 3,
        reset_to_earliest: bool = True,
        error_backoff: tuple[float, float] = (0.1, 5.0),
        linger: Linger | None = None,
        member: HubMember | None = None,
        owns_cluster: bool = True,
    ) -> None:
        self.cluster = cluster
        #: ``cluster`` is this source's alone (closed with it); not when the flow's tasks share it
        self.owns_cluster = owns_cluster
        self.fetcher = RawFetcher(cluster, config)
        #: polls with sessions go through the hub (which owns ``cluster``) when given
        self.member = member
        self.corrupt_retries = corrupt_retries
        self.reset_to_earliest = reset_to_earliest
        self.corrupt_batches_seen = 0
        self.unavailable_fetches = 0
        self.error_backoff = error_backoff
        #: a failing partition's delays: ``error_backoff[0]`` doubling to ``error_backoff[1]``
        self._error_backoff = Backoff(*error_backoff)
        #: partitions whose last fetch failed: (time to fetch again, failures in a row)
        self._failing: dict[TopicPartition, tuple[float, int]] = {}
        self.linger = linger or Linger()
        self._linger_until = 0.0
        #: a poll through the hub returns empty after this long without news (the task's loop
        #: then does what else is due: commits, a new assignment)
        self._member_timeout = self.fetcher.config.max_wait_ms / 1000 + 0.5
        #: each polled topic's id (text) when first seen or as its stored positions give it,
        #: checked again when the metadata changes
        self._topic_ids: dict[str, str] = {}
        self._ids_checked_at = -1  # the metadata generation they were last checked at

    async def resolve_start(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """MM2's default for partitions never mirrored: start at the earliest offset."""
        if not partitions:
            return {}
        return await self.cluster.list_offsets(partitions, EARLIEST if self.reset_to_earliest else LATEST,
                                               partial_after=START_LOOKUP_SECONDS)

    def expect_topic_ids(self, topic_ids: Mapping[str, str]) -> None:
        """The ids the stored positions of newly assigned partitions' topics were written with:
        checked against the metadata at the next poll (another id: ``Polled.recreated``)."""
        self._topic_ids.update(topic_ids)
        self._ids_checked_at = -1  # check at the next poll, whatever the metadata generation

    async def poll(
        self, positions: Mapping[TopicPartition, int], *, sessions: bool = True
    ) -> dict[TopicPartition, Polled]:
        """The batches from ``positions`` on; ``sessions=False`` for a one-off read of a few
        partitions (see :meth:`RawFetcher.fetch`), which the linger neither holds nor sets: it
        paces the task's fetch loop, and the tail reconciler's reads of one partition after the
        other had each waited it (50 ms at 2,000 partitions: seconds for a lease's start)."""
        now = asyncio.get_running_loop().time()
        if not sessions or self.member is not None:
            return await self._poll(positions, now, sessions)  # the hub paces its own, per broker
        if self._linger_until > now:
            await asyncio.sleep(self._linger_until - now)
            now = asyncio.get_running_loop().time()
        polled = await self._poll(positions, now, sessions)
        delay = self.linger.delay(len(positions))
        if delay and fetched_bytes(polled, self.linger.bytes) < self.linger.bytes:
            self._linger_until = asyncio.get_running_loop().time() + delay
        return polled

    async def _poll(
        self, positions: Mapping[TopicPartition, int], now: float, sessions: bool
    ) -> dict[TopicPartition, Polled]:
        ready = positions if not self._failing else {
            tp: o for tp, o in positions.items() if self._failing.get(tp, (now, 0))[0] <= now}
        if positions and not ready:  # every partition waits after an error: wait for the first
            await asyncio.sleep(min(self._failing[tp][0] for tp in positions) - now)
            return {}
        if self.member is not None and sessions:
            # the hub retries an unreachable broker and a corrupt batch by itself; what it raises
            # is a batch that stayed corrupt
            fetched = await self.member.poll(ready, self._member_timeout)
        else:
            fetched = await self._fetch(ready, sessions)
        return await self._polled(positions, fetched)

    async def _fetch(
        self, ready: Mapping[TopicPartition, int], sessions: bool
    ) -> dict[TopicPartition, FetchedPartition]:
        attempt = 0
        while True:
            try:
                fetched = await self.fetcher.fetch(ready, sessions=sessions)
                self.unavailable_fetches = 0
                break
            except (ClientError, BrokerError) as exc:
                # source unreachable or leaderless beyond the client's own retries: report nothing
                # this fetch and try again; positions are unchanged, so nothing is skipped
                self.unavailable_fetches += 1
                log.warning("fetch from the source failed (%s); retrying", exc)
                await asyncio.sleep(UNAVAILABLE_BACKOFF.delay(self.unavailable_fetches - 1))
                return {}
            except CorruptBatchError as exc:
                attempt += 1
                self.corrupt_batches_seen += 1
                log.error("corrupt batch from the source (attempt %d/%d), not forwarded: %s",
                          attempt, self.corrupt_retries, exc)
                if attempt >= self.corrupt_retries:
                    raise
                await asyncio.sleep(CORRUPT_BACKOFF.delay(attempt - 1))
        return fetched

    async def _polled(
        self, positions: Mapping[TopicPartition, int], fetched: Mapping[TopicPartition, FetchedPartition]
    ) -> dict[TopicPartition, Polled]:
        out: dict[TopicPartition, Polled] = {}
        resets: list[TopicPartition] = []
        recreated = self._recreated(positions)
        for tp, f in fetched.items():
            if tp in recreated:
                continue
            if f.error_code == OFFSET_OUT_OF_RANGE:
                resets.append(tp)
                continue
            if not f.ok:
                self._back_off(tp, f.error_name)
                continue
            self._failing.pop(tp, None)
            out[tp] = Polled(f.batches, max(f.next_offset, f.fetch_offset), f.high_watermark,
                             fetch_offset=f.fetch_offset, topic_id=self._topic_ids.get(tp.topic))
        if resets or recreated:
            earliest = await self.cluster.list_offsets([*resets, *recreated], EARLIEST)
            for tp in (*resets, *recreated):
                out[tp] = Polled([], positions[tp], -1, reset_to=earliest[tp], fetch_offset=positions[tp],
                                 recreated=tp in recreated, topic_id=self._topic_ids.get(tp.topic))
        return out

    def _recreated(self, positions: Mapping[TopicPartition, int]) -> set[TopicPartition]:
        """The partitions of ``positions`` whose topic's id changed since it was first seen (looked
        at only when the metadata changed; the new id is remembered, so each change is said once)."""
        cluster = self.cluster
        if cluster.generation == self._ids_checked_at:
            return set()
        self._ids_checked_at = cluster.generation
        changed: set[str] = set()
        for topic in {tp.topic for tp in positions}:
            known = cluster.topic_id(topic)
            if known is None:
                continue
            now = topic_id_text(known)
            was = self._topic_ids.setdefault(topic, now)
            if was != now:
                changed.add(topic)
                self._topic_ids[topic] = now
        return {tp for tp in positions if tp.topic in changed} if changed else set()

    def _back_off(self, tp: TopicPartition, error: str) -> None:
        failures = self._failing[tp][1] if tp in self._failing else 0
        delay = self._error_backoff.delay(failures)
        self._failing[tp] = (asyncio.get_running_loop().time() + delay, failures + 1)
        log.warning("fetch %s: %s; fetching it again in %.1fs", tp, error, delay)

    async def close(self) -> None:
        if self.member is not None:
            self.member.close()  # the hub and its cluster client stay for the other tasks
            return
        await self.fetcher.close()  # its fetch sessions
        if self.owns_cluster:
            await self.cluster.close()
