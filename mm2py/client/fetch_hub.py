"""One fetch session per source broker for all of a worker's tasks of a flow.

Each task fetching its own partitions in its own session (KIP-227) makes the source broker read
every partition of every session on every fetch, and the request rate grows with ``tasks.max``
rather than with the data. :class:`FetchHub` serves many *members* (a task's
:class:`HubMember`) from one :class:`~mm2py.client.fetcher.RawFetcher`: one loop per source broker
sends one request for every partition that broker leads, whichever task mirrors it, paced per
broker (:class:`Linger`), and hands each partition's result to the member that owns it. A broker
that stops answering holds up only its own loop: the partitions other brokers lead keep moving.

Invariants (each named where it is kept):

``TAKEN``
    A partition whose result was handed to its member is not read (it stays in the session,
    limited to 0 bytes: no forget and add again, no request naming thousands of partitions) until
    the member polls again and says where it now stands: the hub never guesses a position, so a
    member that went back (after a failed produce) is fetched from where it says, and a result is
    never handed over twice for one position.
``STALE``
    A result is handed over only if it was fetched from the position the member last asked for
    (a member that moved meanwhile gets nothing of it); the task checks it again
    (``Polled.fetch_offset``).
``BOUNDED``
    A member that is not asking (its pipeline is full) holds at most one result per partition,
    and once what it holds reaches its byte budget none of its partitions is read until it asks.
``ONE-OWNER``
    A partition belongs to the last member that asked for it; partitions are assigned to tasks
    disjointly, so this changes only when one task hands a partition to another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from mm2py.client.cluster import ClusterClient
from mm2py.client.errors import ClientError
from mm2py.client.fetched import FetchedPartition, fetched_bytes
from mm2py.client.fetcher import FetcherConfig, RawFetcher
from mm2py.client.linger import CORRUPT_BACKOFF, UNAVAILABLE_BACKOFF, Linger
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.errors_codes import BrokerError
from mm2py.protocol.types import TopicPartition
from mm2py.retry import Backoff

__all__ = ["FetchHub", "HubMember", "Linger"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Leaders:
    """Each member partition's leader as of one (metadata generation, partitions version)."""

    key: tuple[int, int]
    leaders: dict[TopicPartition, int | None]
    nodes: set[int]
    #: some partition has no known leader
    leaderless: bool
    #: the one broker that leads every partition, if there is one
    only: int | None


class HubMember:
    """One task's view of the hub: :meth:`poll` as a task's own fetcher would answer it."""

    def __init__(self, hub: FetchHub, name: str, budget_bytes: int) -> None:
        self.hub = hub
        self.name = name
        #: BOUNDED: the bytes of results held for this member before its partitions wait
        self.budget_bytes = budget_bytes
        #: every partition of the member's last poll and its position then (STALE)
        self.asked: dict[TopicPartition, int] = {}
        #: TAKEN: the partitions of :attr:`asked` not to read until the next poll (a result held
        #: for them, or a failure raised by the next poll)
        self.taken: set[TopicPartition] = set()
        #: results fetched and not yet handed over by :meth:`poll`; their partitions are TAKEN
        self.inbox: dict[TopicPartition, FetchedPartition] = {}
        self.inbox_bytes = 0
        #: a failure to raise from the next :meth:`poll` (a corrupt batch that stayed corrupt)
        self.error: BaseException | None = None
        self.asking = False
        self._woken: asyncio.Event = asyncio.Event()

    @property
    def full(self) -> bool:
        return self.inbox_bytes >= self.budget_bytes

    async def poll(self, positions: Mapping[TopicPartition, int], timeout: float) -> dict[
            TopicPartition, FetchedPartition]:
        """The results for ``positions`` ({tp: next offset}) fetched since the last poll, or the
        next ones; ``{}`` after ``timeout`` seconds without any. Partitions not in ``positions``
        are no longer fetched for this member."""
        self._update(positions)
        if not self.inbox and self.error is None:
            self.asking = True
            self._woken.clear()
            self.hub.asked()
            handle = asyncio.get_running_loop().call_later(timeout, self._woken.set)
            try:
                await self._woken.wait()
            finally:
                handle.cancel()
                self.asking = False
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        out, self.inbox, self.inbox_bytes = self.inbox, {}, 0
        return out

    def _update(self, positions: Mapping[TopicPartition, int]) -> None:
        hub = self.hub
        owners = hub.owners
        asked = self.asked
        # the same partitions as last time, in the same order, as the same objects (a task's
        # positions are copies of one dict): a list comparison, without hashing them; else as sets
        moved = not (len(positions) == len(asked) and list(positions) == list(asked)) and (
            positions.keys() != asked.keys())
        if moved:
            for tp in self.asked.keys() - positions.keys():
                if owners.get(tp) is self:
                    del owners[tp]
            for tp in positions.keys() - self.asked.keys():
                previous = owners.get(tp)
                if previous is not None and previous is not self:  # ONE-OWNER: handed over
                    previous.drop(tp)
                owners[tp] = self
        inbox = self.inbox
        self.asked = dict(positions)
        self.taken = set()
        for tp, f in list(inbox.items()):  # a result about to be handed over stays TAKEN
            if positions.get(tp) == f.fetch_offset:
                self.taken.add(tp)
            else:  # STALE: the member moved meanwhile
                del inbox[tp]
        if not moved and hub.merged is not None:  # the same partitions: positions in place
            hub.merged.update(positions)
        hub.changed(moved)

    def drop(self, tp: TopicPartition) -> None:
        """Forget ``tp`` (another member now owns it)."""
        self.asked.pop(tp, None)
        self.taken.discard(tp)
        self.inbox.pop(tp, None)

    def deliver(self, fetched: FetchedPartition) -> bool:
        """Hold ``fetched`` for the next poll if it answers the position last asked (STALE)."""
        tp = fetched.tp
        if self.asked.get(tp) != fetched.fetch_offset or tp in self.taken:
            return False
        self.taken.add(tp)  # TAKEN
        self.inbox[tp] = fetched
        self.inbox_bytes += sum(b.size for b in fetched.batches)
        return True

    def fail(self, tp: TopicPartition, error: BaseException) -> None:
        self.taken.add(tp)
        self.error = error
        self.wake()

    def wake(self) -> None:
        self._woken.set()

    def close(self) -> None:
        """Leave the hub: none of this member's partitions is fetched any more."""
        self._update({})
        self.hub.members.pop(self, None)
        self.wake()


class FetchHub:
    """Fetches for many members over one incremental fetch session per source broker (module doc).

    ``config.max_bytes`` bounds a response (all members' partitions a broker leads);
    ``corrupt_retries``: fetches of a partition whose batch is corrupt before its member's poll
    raises :class:`CorruptBatchError` (nothing of it is handed over meanwhile)."""

    def __init__(
        self,
        cluster: ClusterClient,
        config: FetcherConfig,
        linger: Linger | None = None,
        *,
        corrupt_retries: int = 3,
    ) -> None:
        self.cluster = cluster
        self.fetcher = RawFetcher(cluster, replace(config, sessions=True))
        self.linger = linger or Linger()
        self.corrupt_retries = corrupt_retries
        #: the members, in the order they joined (an ordered set: requests keep one order)
        self.members: dict[HubMember, None] = {}
        #: ONE-OWNER: each partition's member
        self.owners: dict[TopicPartition, HubMember] = {}
        #: bumped whenever a member's partitions change (not their positions); with the metadata
        #: generation it guards :attr:`_plan`
        self._version = 0
        #: every member's partitions and positions, in member order (see :meth:`_fetchable`);
        #: None when some member's partitions changed (built again for the next request)
        self.merged: dict[TopicPartition, int] | None = None
        self._plan = _Leaders((-1, -1), {}, set(), False, None)
        #: one loop per source broker that leads a partition to fetch
        self._loops: dict[int, asyncio.Task[None]] = {}
        #: looks for the leaders of partitions whose leader is not known
        self._finding: asyncio.Task[None] | None = None
        #: the metadata generation the loops were last started for
        self._started_at = -1
        #: set when a member asks or the partitions change: loops waiting for work look again
        self._work = asyncio.Event()
        self._closed = False
        #: fetches that failed for want of the source (for figures and logs)
        self.unavailable_fetches = 0
        self.corrupt_batches_seen = 0

    def member(self, name: str, budget_bytes: int) -> HubMember:
        m = HubMember(self, name, budget_bytes)
        self.members[m] = None
        return m

    # ------------------------------------------------------------------ members tell the hub
    def asked(self) -> None:
        self._work.set()

    def changed(self, partitions: bool = True) -> None:
        """A member's positions changed (``partitions``: which partitions it has, too)."""
        if partitions:
            self._version += 1
            self.merged = None
        self._work.set()
        if not self._closed and (partitions or not self._loops
                                 or self._started_at != self.cluster.generation):
            self._start_loops()

    # ---------------------------------------------------------------------------- the loops
    def _fetchable(self) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """Every member's partitions and positions, in one order from round to round, and those
        not to read now (limited to 0 bytes): TAKEN ones, and all of a member that is full."""
        if self.merged is None:  # a member's partitions changed: merged again (thousands, hashed)
            self.merged = {}
            for m in self.members:
                self.merged.update(m.asked)
        limits: dict[TopicPartition, int] = {}
        for m in self.members:
            if m.full:
                limits.update(dict.fromkeys(m.asked, 0))
            elif m.taken:
                limits.update(dict.fromkeys(m.taken, 0))
        return dict(self.merged), limits  # a copy: the request's positions as they were sent

    def _leaders(self) -> _Leaders:
        """Which broker leads each member's partition, worked out again only when the metadata or
        some member's partitions changed (a round asks for it; thousands of partitions)."""
        key = (self.cluster.generation, self._version)
        if self._plan.key != key:
            leader_of = self.cluster.leader_of
            leaders = {tp: leader_of(tp) for tp in self.owners}
            nodes = set(leaders.values())
            self._plan = _Leaders(key, leaders, nodes - {None},  # type: ignore[arg-type]
                                  None in nodes, next(iter(nodes)) if len(nodes) == 1 else None)
        return self._plan

    def _positions_for(self, node: int) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """The partitions ``node`` leads, from where, and those of them not to read now."""
        plan = self._leaders()
        positions, limits = self._fetchable()
        if plan.only is not None:  # one broker leads them all: no lookup per partition
            return (positions, limits) if plan.only == node else ({}, {})
        leaders = plan.leaders
        return ({tp: o for tp, o in positions.items() if leaders.get(tp) == node},
                {tp: n for tp, n in limits.items() if leaders.get(tp) == node})

    def _start_loops(self) -> None:
        """A loop for every broker that leads a partition to fetch (the leaders as of now)."""
        self._started_at = self.cluster.generation
        plan = self._leaders()
        self._start_broker_loops(plan)
        if plan.leaderless and self._finding is None:
            self._finding = asyncio.create_task(self._find_leaders(), name="fetch hub: leaders")

    def _start_broker_loops(self, plan: _Leaders) -> None:
        for node in plan.nodes:
            if node not in self._loops:
                self._loops[node] = asyncio.create_task(self._loop(node), name=f"fetch hub: broker {node}")

    def _someone_asks(self) -> bool:
        return any(m.asking for m in self.members)

    def _leads_any(self, node: int) -> bool:
        return node in self._leaders().nodes

    async def _loop(self, node: int) -> None:
        """Fetch what ``node`` leads while any member asks; end once it leads no partition of any
        member (a later change starts it again)."""
        clock = asyncio.get_running_loop().time
        linger_until = 0.0
        failures = corrupt = 0
        try:
            while not self._closed:
                while not self._someone_asks():
                    self._work.clear()
                    await self._work.wait()
                    if self._closed:
                        return
                if (wait := linger_until - clock()) > 0:
                    await asyncio.sleep(wait)
                positions, limits = self._positions_for(node)
                if len(limits) == len(positions):  # none, all TAKEN or their members full:
                    if not self._leads_any(node):  # until a member asks again
                        return
                    self._work.clear()
                    await self._work.wait()
                    continue
                try:
                    fetched = await self.fetcher.fetch(positions, partition_max_bytes=limits)
                    failures = corrupt = 0
                except (ClientError, BrokerError) as exc:
                    # the broker is unreachable or leaderless beyond the client's own retries:
                    # nothing this time; positions are unchanged, so nothing is skipped
                    failures += 1
                    self.unavailable_fetches += 1
                    log.warning("fetch from source broker %d failed (%s); retrying", node, exc)
                    await asyncio.sleep(UNAVAILABLE_BACKOFF.delay(failures - 1))
                    continue
                except CorruptBatchError as exc:
                    corrupt += 1
                    self.corrupt_batches_seen += 1
                    log.error("corrupt batch from source broker %d (attempt %d/%d), not forwarded: %s",
                              node, corrupt, self.corrupt_retries, exc)
                    if corrupt < self.corrupt_retries:
                        await asyncio.sleep(CORRUPT_BACKOFF.delay(corrupt - 1))
                    else:  # its member's poll raises it; that partition is not fetched meanwhile
                        corrupt = 0
                        self._fail(exc, positions)
                    continue
                self._hand_over(fetched)
                if self._started_at != self.cluster.generation:  # leaders may have moved
                    self._start_loops()
                delay = self.linger.delay(len(positions))
                if delay and fetched_bytes(fetched, self.linger.bytes) < self.linger.bytes:
                    linger_until = clock() + delay
        finally:
            if self._loops.get(node) is asyncio.current_task():
                del self._loops[node]

    def _fail(self, exc: CorruptBatchError, positions: Mapping[TopicPartition, int]) -> None:
        """The partition of a batch that stayed corrupt fails its member (every member fetched
        with it if the error does not say which)."""
        suspects = [exc.partition] if exc.partition is not None else list(positions)
        for tp in suspects:
            owner = self.owners.get(tp)
            if owner is not None:
                owner.fail(tp, exc)

    def _hand_over(self, fetched: Mapping[TopicPartition, FetchedPartition]) -> None:
        owners = self.owners
        woken: dict[HubMember, None] = {}
        for tp, f in fetched.items():
            m = owners.get(tp)
            if m is not None and m.deliver(f):
                woken[m] = None
        for m in woken:
            m.wake()

    async def _find_leaders(self) -> None:
        """Partitions without a known leader: the metadata asked again, 0.2 s doubling to 5 s,
        and each leader found gets its loop."""
        backoff = Backoff(0.2, 5.0)
        try:
            while not self._closed:
                with contextlib.suppress(ClientError, BrokerError):
                    plan = self._leaders()
                    if not plan.leaderless:
                        return
                    await self.cluster.refresh_metadata(
                        {tp.topic for tp, node in plan.leaders.items() if node is None})
                plan = self._leaders()
                self._start_broker_loops(plan)
                if not plan.leaderless:
                    return
                await asyncio.sleep(backoff.next_delay())
        finally:
            self._finding = None

    async def close(self) -> None:
        """Stop every loop and close the fetch sessions on their brokers."""
        self._closed = True
        self._work.set()
        loops = [*self._loops.values(), *([self._finding] if self._finding is not None else [])]
        for t in loops:
            t.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        for m in list(self.members):
            m.wake()
        await self.fetcher.close()
