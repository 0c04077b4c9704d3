"""The Spark driver's lease table: one writer per partition, exact hand-over, fencing."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.spark.driver.lease_table import Go, Lease, LeaseState, LeaseTable, Stop
from tests.support.hypothesis_examples import examples

A, B, C = (TopicPartition("t", p) for p in range(3))


def _gos(actions: list[Go | Stop]) -> dict[str, Go]:
    return {a.lease_id: a for a in actions if isinstance(a, Go)}


def _stops(actions: list[Go | Stop]) -> set[str]:
    return {a.lease_id for a in actions if isinstance(a, Stop)}


def test_a_first_lease_is_granted_at_hello_and_loads_its_positions() -> None:
    table = LeaseTable()
    lease = table.start("e->w", 0, [A, B], now=0)
    assert lease.state is LeaseState.STARTING and table.holder("e->w", A) is None
    go = _gos(table.ready(lease.lease_id, now=1))[lease.lease_id]
    assert go.positions == {A: None, B: None}  # nothing carried over: load and reconcile
    assert lease.state is LeaseState.RUNNING and table.holder("e->w", A) == lease.lease_id


def test_a_successor_waits_for_the_release_and_gets_only_clean_positions() -> None:
    table = LeaseTable()
    old = table.start("e->w", 0, [A, B], now=0)
    table.ready(old.lease_id, now=0)
    new = table.start("e->w", 0, [A, B], now=60)
    assert new.replaces
    actions = table.ready(new.lease_id, now=61)
    assert _stops(actions) == {old.lease_id} and not _gos(actions)  # nobody writes twice
    assert old.state is LeaseState.STOPPING and table.holder("e->w", A) == old.lease_id
    actions = table.released(old.lease_id, {A: Position(10, 7), B: None}, now=61.1)
    assert _gos(actions)[new.lease_id].positions == {A: Position(10, 7), B: None}  # B was in doubt
    assert table.holder("e->w", B) == new.lease_id and old.state is LeaseState.RELEASED


def test_a_lease_whose_job_ended_is_fenced_before_its_partitions_move() -> None:
    table = LeaseTable(fence_seconds=5)
    old = table.start("e->w", 0, [A], now=0)
    table.ready(old.lease_id, now=0)
    table.seen(old.lease_id, now=10)
    new = table.start("e->w", 0, [A], now=11)
    table.ready(new.lease_id, now=11)
    # Spark gave up on the old lease's job, but its process may still be producing
    assert not _gos(table.job_done(old.lease_id, now=12))
    assert not _gos(table.tick(now=19.9))
    assert _gos(table.tick(now=20))[new.lease_id].positions == {A: None}  # two fences later
    assert old.state is LeaseState.LOST


def test_a_closed_connection_after_the_job_ended_frees_the_partitions_at_once() -> None:
    table = LeaseTable(fence_seconds=5)
    old = table.start("e->w", 0, [A], now=0)
    table.ready(old.lease_id, now=0)
    table.job_done(old.lease_id, now=1)
    assert old.state is LeaseState.RUNNING  # still heard from recently
    new = table.start("e->w", 0, [A], now=1)
    table.ready(new.lease_id, now=1)
    assert new.lease_id in _gos(table.disconnected(old.lease_id, now=1.5))


def test_an_older_waiting_lease_is_cancelled_not_granted() -> None:
    table = LeaseTable()
    first = table.start("e->w", 0, [A], now=0)
    second = table.start("e->w", 0, [A], now=0)
    table.ready(second.lease_id, now=1)  # the newer one connected first and holds A
    actions = table.ready(first.lease_id, now=2)
    assert _stops(actions) == {first.lease_id} and first.cancelled
    assert table.holder("e->w", A) == second.lease_id
    assert not _gos(table.tick(now=3))


def test_a_successor_spark_cannot_place_gets_its_predecessor_stopped_after_a_while() -> None:
    table = LeaseTable(ready_timeout=15)
    old = table.start("e->w", 0, [A], now=0)
    table.ready(old.lease_id, now=0)
    table.start("e->w", 0, [A], now=60)
    assert not _stops(table.tick(now=74))
    assert _stops(table.tick(now=75)) == {old.lease_id}


def test_forgetting_a_flow_drops_carried_positions() -> None:
    table = LeaseTable()
    old = table.start("e->w", 0, [A], now=0)
    table.ready(old.lease_id, now=0)
    table.stop(old.lease_id, "flow stopped")
    table.released(old.lease_id, {A: Position(5, 5)}, now=1)
    table.forget_flow("e->w")
    new = table.start("e->w", 0, [A], now=2)
    assert _gos(table.ready(new.lease_id, now=2))[new.lease_id].positions == {A: None}


def test_flows_hold_the_same_source_partition_independently() -> None:
    table = LeaseTable()
    one, two = table.start("e->w", 0, [A], now=0), table.start("e->n", 0, [A], now=0)
    assert one.lease_id in _gos(table.ready(one.lease_id, now=1))
    assert two.lease_id in _gos(table.ready(two.lease_id, now=1))


def test_a_halted_flow_stops_its_leases_grants_none_and_resumes_from_committed_positions() -> None:
    table = LeaseTable()
    running = table.start("e->w", 0, [A], now=0)
    table.ready(running.lease_id, now=0)
    waiting = table.start("e->w", 1, [B], now=0)  # started, not connected yet
    other = table.start("e->n", 0, [A], now=0)
    table.ready(other.lease_id, now=0)
    actions = table.halt("e->w", "paused")
    assert _stops(actions) == {running.lease_id, waiting.lease_id}  # the other flow runs on
    assert running.state is LeaseState.STOPPING and waiting.cancelled
    assert table.writing("e->w")  # until it has committed and released
    with pytest.raises(ValueError, match="halted"):
        table.start("e->w", 0, [A], now=1)
    assert not _gos(table.ready(waiting.lease_id, now=1))  # a lease started before: never granted
    table.released(running.lease_id, {A: Position(7, 7)}, now=2)
    assert not table.writing("e->w") and table.holder("e->w", A) is None
    table.resume("e->w")  # its positions may have been moved meanwhile: load them
    fresh = table.start("e->w", 0, [A], now=3)
    assert _gos(table.ready(fresh.lease_id, now=3))[fresh.lease_id].positions == {A: None}


def test_a_waiting_lease_of_a_halted_flow_is_stopped_when_grants_are_considered() -> None:
    table = LeaseTable()
    lease = table.start("e->w", 0, [A], now=0)
    table.halted.add("e->w")  # halted between its start and its HELLO, by no stop of the table's
    actions = table.ready(lease.lease_id, now=1)
    assert _stops(actions) == {lease.lease_id} and not _gos(actions) and lease.cancelled
    assert not table.writing("e->w")


def test_a_halted_flows_lease_that_cannot_release_keeps_it_writing_until_fenced() -> None:
    table = LeaseTable(fence_seconds=5)
    lease = table.start("e->w", 0, [A], now=0)
    table.ready(lease.lease_id, now=0)
    table.halt("e->w", "stopped")
    table.job_done(lease.lease_id, now=1)  # Spark lost its job; its process may still write
    assert table.writing("e->w")
    table.tick(now=10)  # two fence intervals unheard
    assert lease.state is LeaseState.LOST and not table.writing("e->w")


def _granted(table: LeaseTable, flow: str = "e->w") -> Lease:
    lease = table.start(flow, 0, [A], now=0)
    assert table.hello(lease.lease_id, now=0) == []
    assert lease.lease_id in _gos(table.ready(lease.lease_id, now=0))
    return lease


def test_a_killed_executor_is_given_up_two_fence_intervals_after_it_was_last_heard() -> None:
    table = LeaseTable(fence_seconds=4)
    lease = _granted(table)
    table.seen(lease.lease_id, now=10)
    table.disconnected(lease.lease_id, now=10.2)  # the process died: its socket closed; Spark still waits
    assert table.tick(17.9) == [] and lease.state is LeaseState.RUNNING
    table.tick(18.0)
    assert lease.state is LeaseState.LOST and table.holder("e->w", A) is None
    successor = table.start("e->w", 0, [A], now=18.1)
    table.hello(successor.lease_id, now=19)
    assert _gos(table.ready(successor.lease_id, now=20))[successor.lease_id].positions == {A: None}


def test_a_silent_lease_whose_connection_stays_open_is_not_given_up_while_its_job_runs() -> None:
    table = LeaseTable(fence_seconds=4)
    lease = _granted(table)  # a paused process: it may wake up and write
    table.tick(1000)
    assert lease.state is LeaseState.RUNNING


def test_a_rerun_of_a_granted_lease_is_refused_at_once_and_ends_the_first_attempt() -> None:
    table = LeaseTable(fence_seconds=4)
    lease = _granted(table)
    table.disconnected(lease.lease_id, now=1)
    actions = table.hello(lease.lease_id, now=2)  # Spark re-ran the task: it gave the executor up
    assert lease.lease_id in _stops(actions)
    assert lease.state is LeaseState.LOST and table.holder("e->w", A) is None


def test_a_rerun_while_the_first_attempt_is_connected_is_refused_and_the_first_keeps_its_partitions() -> None:
    table = LeaseTable(fence_seconds=4)
    lease = _granted(table)
    assert lease.lease_id in _stops(table.hello(lease.lease_id, now=1))
    assert lease.state is LeaseState.RUNNING and table.holder("e->w", A) == lease.lease_id
    table.tick(9)  # silent for two fence intervals, and Spark gave it up: lost
    assert lease.state is LeaseState.LOST


def test_an_attempt_after_a_lost_attempt_that_was_never_granted_takes_the_lease_on() -> None:
    table = LeaseTable(fence_seconds=4)
    lease = table.start("e->w", 0, [A], now=0)
    assert table.hello(lease.lease_id, now=0) == []
    table.disconnected(lease.lease_id, now=1)  # died while building its task: held nothing
    assert table.hello(lease.lease_id, now=2) == []
    assert lease.lease_id in _gos(table.ready(lease.lease_id, now=3))


class LeaseMachine(RuleBasedStateMachine):
    """Random interleavings of starts, hellos (re-runs too), readies, releases, job ends,
    disconnects and time."""

    def __init__(self) -> None:
        super().__init__()
        self.table = LeaseTable(fence_seconds=1, ready_timeout=3)
        self.now = 0.0
        self.writers: dict[TopicPartition, set[str]] = {tp: set() for tp in (A, B, C)}
        self.clean: dict[TopicPartition, Position] = {}  # the last clean release per partition
        self.go_positions: dict[str, dict[TopicPartition, Position | None]] = {}

    def _apply(self, actions: list[Go | Stop]) -> None:
        for action in actions:
            if isinstance(action, Go):
                lease = self.table.leases[action.lease_id]
                assert lease.flow not in self.table.halted  # HALTED: no grant while paused/stopped
                for tp, pos in action.positions.items():
                    # EXACT_HANDOFF: a carried position is exactly the last clean release
                    assert pos is None or pos == self.clean.get(tp)
                    self.clean.pop(tp, None)
                    self.writers[tp].add(lease.lease_id)
                self.go_positions[action.lease_id] = dict(action.positions)
        for lease in self.table.leases.values():
            if lease.state.ended:
                for tp in lease.partitions:
                    self.writers[tp].discard(lease.lease_id)

    def _pick(self, data: st.DataObject) -> str | None:
        ids = sorted(self.table.leases)
        return data.draw(st.sampled_from(ids)) if ids else None

    @rule(task=st.integers(0, 1), parts=st.sets(st.sampled_from([A, B, C]), min_size=1))
    def start(self, task: int, parts: set[TopicPartition]) -> None:
        if "f" in self.table.halted:
            with pytest.raises(ValueError, match="halted"):
                self.table.start("f", task, parts, self.now)
            return
        self.table.start("f", task, parts, self.now)

    @rule()
    def halt(self) -> None:
        self._apply(self.table.halt("f", "paused"))

    @rule()
    def resume(self) -> None:
        self.table.resume("f")
        self.clean.clear()  # the released positions are forgotten: the next leases load them

    @rule(data=st.data())
    def hello(self, data: st.DataObject) -> None:  # an attempt connects (the first, or a re-run)
        if (lease_id := self._pick(data)) is not None:
            self._apply_losing(self.table.hello(lease_id, self.now))

    @rule(data=st.data())
    def ready(self, data: st.DataObject) -> None:
        if (lease_id := self._pick(data)) is not None:
            self._apply(self.table.ready(lease_id, self.now))

    @rule(data=st.data(), offset=st.integers(0, 100), doubt=st.booleans())
    def release(self, data: st.DataObject, offset: int, doubt: bool) -> None:
        lease_id = self._pick(data)
        if lease_id is None:
            return
        lease = self.table.leases[lease_id]
        was_holding = lease.state in (LeaseState.RUNNING, LeaseState.STOPPING)
        positions = {tp: None if doubt else Position(offset, offset) for tp in lease.partitions}
        actions = self.table.released(lease_id, positions, self.now)
        if was_holding:
            for tp, pos in positions.items():
                if pos is None:
                    self.clean.pop(tp, None)
                else:
                    self.clean[tp] = pos
                self.writers[tp].discard(lease_id)
        self._apply(actions)

    @rule(data=st.data())
    def job_done(self, data: st.DataObject) -> None:
        if (lease_id := self._pick(data)) is not None:
            self._apply_losing(self.table.job_done(lease_id, self.now))

    @rule(data=st.data())
    def disconnect(self, data: st.DataObject) -> None:
        if (lease_id := self._pick(data)) is not None:
            self._apply_losing(self.table.disconnected(lease_id, self.now))

    @rule(seconds=st.floats(0, 3))
    def wait(self, seconds: float) -> None:
        self.now += seconds
        self._apply_losing(self.table.tick(self.now))

    def _apply_losing(self, actions: list[Go | Stop]) -> None:
        for lease in self.table.leases.values():
            if lease.state is LeaseState.LOST:
                for tp in lease.partitions:
                    if lease.lease_id in self.writers[tp]:
                        self.clean.pop(tp, None)  # a lost holder leaves nothing to carry over
        self._apply(actions)

    @invariant()
    def one_writer_per_partition(self) -> None:
        for tp, ids in self.writers.items():
            assert len(ids) <= 1, f"{tp} has writers {ids}"
            for lease_id in ids:
                assert self.table.holder("f", tp) == lease_id

    @invariant()
    def a_halted_flow_has_no_running_lease(self) -> None:
        if "f" in self.table.halted:  # its leases were told to stop; none is granted since
            assert all(x.state is not LeaseState.RUNNING for x in self.table.leases.values())


TestLeaseMachine = LeaseMachine.TestCase
TestLeaseMachine.settings = settings(max_examples=examples(150), stateful_step_count=40, deadline=None)
