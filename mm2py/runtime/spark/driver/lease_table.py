"""Who may write which target partition: the Spark driver's table of mirror leases (pure, no I/O).

A *lease* is one mirror task running continuously on a Spark executor for a while (``--lease-seconds``).
Leases of the same partitions follow each other without a gap Spark would impose: the driver
starts the successor (a new Spark job) while the predecessor still mirrors. The successor says
HELLO as soon as its Python code runs (who it is: a second attempt of a lease is refused at once),
builds its task, and once it has connected both clusters says READY; the predecessor is told to
STOP, finishes the batches in hand, commits and reports its positions (RELEASED), and only then
does the successor get GO — with those positions, so it neither re-reads the progress topic nor
walks the target tail.

Invariants (each named where the code keeps it):

- **ONE_WRITER**: at any time at most one lease holds a ``(flow, partition)``, and only a lease
  that was sent GO for it produces it.
- **EXACT_HANDOFF**: a successor starts from carried-over positions only for partitions its
  predecessor released cleanly (committed, no produce outcome in doubt); for any other partition
  GO carries ``None`` and the executor loads the committed position and reconciles the target
  tail, as after a crash.
- **FENCING**: a lease that ended without a release is given up only once its process cannot
  write any more. An executor that cannot hear the driver for one fence interval, or whose
  connection to it closes, stops mirroring by itself; so a lease is LOST when Spark has given up
  on its attempt (its job ended, or a second attempt said HELLO) and its connection is closed, or
  when it has not been heard from for two fence intervals and either Spark gave up on it or its
  connection closed (a killed executor: its partitions are leased again within two fence
  intervals, whatever Spark's own timeouts). A lease that is merely silent with its connection
  open (a paused process) is not given up while its Spark job runs. On a mirror host, Spark
  giving up on the host's attempt counts as the job's end for each of its leases (SPARK_GAVE_UP
  in ``host_pool.py``).
- **HALTED**: a paused or stopped flow (:meth:`LeaseTable.halt`) gets no lease and none of its
  leases is granted; its running leases are stopped (they commit and release). Only once none of
  them holds a partition any more (:meth:`LeaseTable.writing`) may its positions be moved, and on
  resume the positions they released are forgotten: the next leases load the committed (perhaps
  moved) ones.

The asyncio side (:mod:`.lease_coordinator`) feeds events in and carries the returned
:class:`Go` / :class:`Stop` actions to the executors.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition

__all__ = ["Go", "Lease", "LeaseState", "LeaseTable", "Stop"]

Key = tuple[str, TopicPartition]  # (flow name, source partition)


class LeaseState(enum.StrEnum):
    STARTING = "STARTING"  # its Spark job was submitted; not ready yet (it may have said HELLO)
    WAITING = "WAITING"  # ready (READY); waiting for its partitions to be free
    RUNNING = "RUNNING"  # sent GO: it holds its partitions and mirrors them
    STOPPING = "STOPPING"  # sent STOP: still holds its partitions until it releases them
    RELEASED = "RELEASED"  # stopped and reported its positions
    LOST = "LOST"  # ended without a release (failed, killed, cut off); fenced

    @property
    def ended(self) -> bool:
        return self in (LeaseState.RELEASED, LeaseState.LOST)


@dataclass
class Lease:
    lease_id: str
    flow: str
    task_id: int
    partitions: frozenset[TopicPartition]
    started: float
    state: LeaseState = LeaseState.STARTING
    last_seen: float = 0.0  # the last message from its executor (driver clock)
    connected: bool = False  # its executor's connection is open
    hung_up: bool = False  # its connection was open and closed
    job_done: bool = False  # its Spark job returned or failed
    rerun: bool = False  # Spark started a second attempt of it: the first is given up by Spark
    replaces: bool = False  # started as the successor of a running lease
    cancelled: bool = False  # told to stop before it was granted: never granted
    seq: int = 0  # start order: a lease only ever takes partitions over from older ones


@dataclass(frozen=True)
class Go:
    lease_id: str
    #: every partition of the lease: carried-over position, or None (load and reconcile)
    positions: Mapping[TopicPartition, Position | None]


@dataclass(frozen=True)
class Stop:
    lease_id: str
    reason: str


Action = Go | Stop


@dataclass
class LeaseTable:
    fence_seconds: float = 4.0  # see FENCING; a lost executor's partitions move within 2x this
    #: a successor that has not said HELLO after this long gets its predecessor stopped anyway
    #: (Spark may have no free slot for it until the predecessor ends)
    ready_timeout: float = 15.0
    leases: dict[str, Lease] = field(default_factory=dict)
    _holders: dict[Key, str] = field(default_factory=dict)  # guards ONE_WRITER
    _handoff: dict[Key, Position] = field(default_factory=dict)  # clean releases (EXACT_HANDOFF)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    carried_over: int = 0  # partitions granted with their predecessor's position (EXACT_HANDOFF)
    halted: set[str] = field(default_factory=set)  # flows paused or stopped (HALTED)
    #: leases given up since the driver last looked, each with why (it logs them)
    lost: list[tuple[Lease, str]] = field(default_factory=list)

    # -- the driver's side ------------------------------------------------------------------
    def start(self, flow: str, task_id: int, partitions: Iterable[TopicPartition], now: float) -> Lease:
        """A lease for a Spark job about to be submitted."""
        if flow in self.halted:  # HALTED
            raise ValueError(f"flow {flow!r} is halted: it gets no lease")
        parts = frozenset(partitions)
        replaces = any(self._holders.get((flow, tp)) is not None for tp in parts)
        seq = next(self._ids)
        lease = Lease(f"{flow}#{task_id}#{seq}", flow, task_id, parts, now,
                      last_seen=now, replaces=replaces, seq=seq)
        self.leases[lease.lease_id] = lease
        return lease

    def current(self, flow: str, task_id: int) -> list[Lease]:
        """The task's leases that have not ended, oldest first."""
        return [x for x in self.leases.values()
                if x.flow == flow and x.task_id == task_id and not x.state.ended]

    def stop(self, lease_id: str, reason: str) -> list[Action]:
        """Stop a lease with no successor (its task or flow went away, the worker stops)."""
        lease = self.leases.get(lease_id)
        if lease is None or lease.state.ended or lease.state is LeaseState.STOPPING or lease.cancelled:
            return []
        if lease.state is LeaseState.RUNNING:
            lease.state = LeaseState.STOPPING
        else:
            lease.cancelled = True  # not granted yet: it never will be
        return [Stop(lease_id, reason)]

    def halt(self, flow: str, reason: str) -> list[Action]:
        """HALTED: no lease of ``flow`` is granted from now on; its leases are stopped."""
        self.halted.add(flow)
        actions: list[Action] = []
        for lease in list(self.leases.values()):
            if lease.flow == flow and not lease.state.ended:
                actions += self.stop(lease.lease_id, reason)
        return actions

    def resume(self, flow: str) -> None:
        """``flow`` may be leased again, from its committed positions (they may have moved)."""
        self.halted.discard(flow)
        self.forget_flow(flow)

    def writing(self, flow: str) -> bool:
        """Whether a lease of ``flow`` holds partitions (granted, not ended): it may still write."""
        return any(x.flow == flow and x.state in (LeaseState.RUNNING, LeaseState.STOPPING)
                   for x in self.leases.values())

    def forget_flow(self, flow: str) -> None:
        """A flow replaced or removed: positions carried over for it are no longer trusted."""
        for key in [k for k in self._handoff if k[0] == flow]:
            del self._handoff[key]

    def holder(self, flow: str, tp: TopicPartition) -> str | None:
        return self._holders.get((flow, tp))

    # -- events from executors and Spark ------------------------------------------------------
    def hello(self, lease_id: str, now: float) -> list[Action]:
        """An attempt of the lease connected, before building its task. A ``Stop`` for it in the
        answer refuses the attempt: it must build nothing and write nothing. Only the first
        connection of a lease not yet granted is accepted; a second attempt of a lease that was
        granted is Spark re-running it (its executor was lost), which may end the first (FENCING)."""
        lease = self.leases.get(lease_id)
        if lease is None or lease.state.ended:
            return [Stop(lease_id, "unknown or ended lease")]
        if lease.cancelled:
            return [Stop(lease_id, "cancelled before it was granted")]
        if lease.connected or lease.state is not LeaseState.STARTING:
            lease.rerun = True
            return [Stop(lease_id, "this lease was already started once"), *self.tick(now)]
        # a lease never granted holds nothing: an attempt after a lost one may take it on
        lease.connected, lease.hung_up, lease.last_seen = True, False, now
        return []

    def ready(self, lease_id: str, now: float) -> list[Action]:
        """The lease built its task and connected both clusters: it may be granted."""
        lease = self.leases.get(lease_id)
        if lease is None or lease.state.ended:
            return [Stop(lease_id, "unknown or ended lease")]
        lease.connected, lease.last_seen = True, now
        if lease.cancelled:
            return [Stop(lease_id, "cancelled before it was granted")]
        if lease.state is LeaseState.STARTING:
            lease.state = LeaseState.WAITING
        return self._grant()

    def seen(self, lease_id: str, now: float) -> None:
        lease = self.leases.get(lease_id)
        if lease is not None:
            lease.last_seen = now

    def released(self, lease_id: str, positions: Mapping[TopicPartition, Position | None],
                 now: float) -> list[Action]:
        """The lease stopped, committed, and reports each partition's position (None: in doubt)."""
        lease = self.leases.get(lease_id)
        if lease is None or lease.state.ended:
            return []
        lease.last_seen = now
        held = lease.state in (LeaseState.RUNNING, LeaseState.STOPPING)
        lease.state = LeaseState.RELEASED
        if held:
            for tp in lease.partitions:
                self._let_go(lease, tp, positions.get(tp))
        return self._grant()

    def disconnected(self, lease_id: str, now: float) -> list[Action]:
        lease = self.leases.get(lease_id)
        if lease is not None:
            lease.hung_up, lease.connected = lease.connected or lease.hung_up, False
        return self.tick(now)

    def job_done(self, lease_id: str, now: float) -> list[Action]:
        lease = self.leases.get(lease_id)
        if lease is not None:
            lease.job_done = True
        return self.tick(now)

    def tick(self, now: float) -> list[Action]:
        """Give up fenced leases, stop predecessors of successors Spark cannot place, grant."""
        actions: list[Action] = []
        for lease in self.leases.values():
            if not lease.state.ended and self._fenced(lease, now):
                self._lose(lease)
        for lease in self.leases.values():
            waiting = lease.state is LeaseState.STARTING and lease.replaces and not lease.cancelled
            if waiting and now - lease.started >= self.ready_timeout:
                for holder in self._blockers(lease):
                    actions += self.stop(holder.lease_id, "its successor is waiting for a Spark slot")
        return actions + self._grant()

    def prune(self, keep: int = 200) -> None:
        """Drop the oldest ended leases beyond ``keep`` (the table lives as long as the worker)."""
        ended = [k for k, x in self.leases.items() if x.state.ended]
        for k in ended[: max(0, len(ended) - keep)]:
            del self.leases[k]

    # -- rules ------------------------------------------------------------------------------
    def _fenced(self, lease: Lease, now: float) -> bool:
        """FENCING: the lease's process can no longer write."""
        given_up = lease.job_done or lease.rerun  # by Spark
        silent = now - lease.last_seen >= 2 * self.fence_seconds
        if given_up:
            return not lease.connected or silent
        return lease.hung_up and not lease.connected and silent

    def _lose(self, lease: Lease) -> None:
        held = lease.state in (LeaseState.RUNNING, LeaseState.STOPPING)
        lease.state = LeaseState.LOST
        if lease.rerun or lease.job_done:  # FENCING: and closed, or silent for two fence intervals
            why = "Spark re-ran it" if lease.rerun else "its Spark job ended"
            why += ", connection closed" if not lease.connected else ", silent"
        else:
            why = "its executor's connection closed"
        self.lost.append((lease, why))
        if held:
            for tp in lease.partitions:
                self._let_go(lease, tp, None)

    def _let_go(self, lease: Lease, tp: TopicPartition, position: Position | None) -> None:
        key = (lease.flow, tp)
        if self._holders.get(key) == lease.lease_id:
            del self._holders[key]
        # EXACT_HANDOFF: only a clean release carries a position over
        if position is None:
            self._handoff.pop(key, None)
        else:
            self._handoff[key] = position

    def _blockers(self, lease: Lease) -> list[Lease]:
        keys = [(lease.flow, tp) for tp in lease.partitions]
        ids = {self._holders[k] for k in keys if k in self._holders}
        ids.discard(lease.lease_id)
        return sorted((self.leases[i] for i in ids), key=lambda x: x.seq)

    def _grant(self) -> list[Action]:
        actions: list[Action] = []
        for lease in list(self.leases.values()):
            if lease.state is not LeaseState.WAITING or lease.cancelled:
                continue
            if lease.flow in self.halted:  # HALTED (a lease started before the halt)
                actions += self.stop(lease.lease_id, "its flow is paused or stopped")
                continue
            blockers = self._blockers(lease)
            if any(holder.seq > lease.seq for holder in blockers):
                actions += self.stop(lease.lease_id, "a newer lease holds its partitions")
                continue
            if blockers:
                for holder in blockers:
                    actions += self.stop(holder.lease_id, f"lease {lease.lease_id} takes over")
                continue
            # ONE_WRITER: every partition is free; this lease holds them all from now on
            for tp in lease.partitions:
                self._holders[(lease.flow, tp)] = lease.lease_id
            positions = {tp: self._handoff.pop((lease.flow, tp), None) for tp in sorted(lease.partitions)}
            self.carried_over += sum(p is not None for p in positions.values())
            lease.state = LeaseState.RUNNING
            actions.append(Go(lease.lease_id, positions))
        return actions
