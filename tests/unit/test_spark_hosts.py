"""The Spark driver's mirror hosts: leases placed on long-lived hosts, renewed inside one host,
reported by ENDED, and moved when a host is lost. The hosts here speak the lease protocol over a
real loopback socket from a thread, as a host's Spark job would; no Spark, no broker (the real
host runs on Spark executors in tests/integration/test_spark_*.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
import socket
import threading
import time
from typing import Any

from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.spark.driver.flow_runner import SparkTask
from mm2py.runtime.spark.driver.host_pool import HostPool
from mm2py.runtime.spark.driver.lease_scheduler import LeaseScheduler, LeaseSettings
from mm2py.runtime.spark.driver.lease_table import LeaseState
from mm2py.runtime.spark.executor.host import HostResult, HostWork
from mm2py.runtime.spark.executor.lease import LeaseResult, LeaseWork
from mm2py.runtime.spark.lease_messages import (
    Ack,
    Ended,
    GoMsg,
    Hello,
    HostHello,
    Message,
    Ready,
    Released,
    StartLease,
    StopMsg,
    decode,
    encode,
)

A, B, C = (TopicPartition("orders", p) for p in range(3))


@dataclasses.dataclass(frozen=True)
class FlowSettings:
    """A flow's configuration as far as a lease's work carries it (pickled to the host)."""

    name: str = "f"
    fetch_linger_partitions_min: int = 0

    def model_copy(self, update: dict[str, Any]) -> FlowSettings:
        return dataclasses.replace(self, **update)


class FakeFlow:
    """The parts of a SparkFlowRunner the scheduler uses."""

    def __init__(self, tasks: dict[int, tuple[TopicPartition, ...]]) -> None:
        self.name = "f"
        self.flow: Any = FlowSettings()
        self.state = "RUNNING"
        self.tasks = {i: SparkTask(i, parts) for i, parts in tasks.items()}
        self.absorbed: list[LeaseResult] = []
        self.failed: list[str] = []

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.tasks.values())

    def absorb_lease(self, result: LeaseResult, now: float) -> None:
        self.absorbed.append(result)

    def fail_task(self, task_id: int, error: str, now: float) -> None:
        self.failed.append(error)
        self.tasks[task_id].fail(error, now)

    def report_lease(self, task_id: int, lag: Any, fold: Any, times: Any = None) -> None:
        fold(self.tasks[task_id])


class FakeHosts:
    """Hosts as Spark would run them: each a blocking call that lives until stopped or killed."""

    def __init__(self) -> None:
        self.placed: dict[str, list[str]] = {}  # host id -> the leases placed on it, in order
        self.pacing: list[int] = []  # each placed lease's mm2py.fetch.linger.partitions.min
        self.killed: set[str] = set()  # hosts killed: their socket closed, their job failed
        #: hosts killed whose Spark job goes on (Spark runs the task again elsewhere) until set
        self.retrying: dict[str, threading.Event] = {}
        self.socks: dict[str, socket.socket] = {}
        self.lock = threading.Lock()

    def kill(self, host_id: str, job_goes_on: bool = False) -> None:
        if job_goes_on:
            self.retrying[host_id] = threading.Event()
        self.killed.add(host_id)
        self.socks[host_id].shutdown(socket.SHUT_RDWR)

    def collect(self, work: HostWork) -> HostResult:
        with socket.create_connection(work.coordinator) as sock, sock.makefile("rwb") as f:
            def send(msg: Message) -> None:
                f.write(encode(msg))
                f.flush()

            send(HostHello(work.host_id, work.token, "fake-executor"))
            assert decode(f.readline()) == Ack()
            with self.lock:
                self.placed[work.host_id] = []
                self.socks[work.host_id] = sock
            while True:
                line = f.readline()
                if work.host_id in self.killed:
                    if work.host_id in self.retrying:  # the job ends when the test lets it
                        self.retrying[work.host_id].wait(30)
                    raise RuntimeError("executor lost")
                if not line:
                    return HostResult(work.host_id, "fake", reason="the driver hung up")
                msg = decode(line)
                if isinstance(msg, StartLease):
                    with self.lock:
                        self.placed[work.host_id].append(msg.lease)
                        self.pacing.append(pickle.loads(msg.work).spec.flow.fetch_linger_partitions_min)
                    send(Hello(msg.lease, work.token))
                elif isinstance(msg, Ack) and msg.lease:  # HELLO accepted: the task is built
                    send(Ready(msg.lease, work.token))
                elif isinstance(msg, StopMsg) and not msg.lease:
                    return HostResult(work.host_id, "fake", reason=msg.reason)
                elif isinstance(msg, StopMsg):  # commit, release, end
                    send(Released(msg.lease, work.token, {A: Position(7, 7)}))
                    send(Ended(msg.lease, work.token, granted=True, positions={A: 7}, metrics={"records": 3}))
                elif isinstance(msg, GoMsg):
                    pass


async def _until(check: Any, sched: LeaseScheduler, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await sched.step()
        await asyncio.sleep(0.02)


async def test_leases_go_to_the_lightest_host_renew_inside_it_and_move_when_it_is_lost() -> None:
    hosts = FakeHosts()

    def no_job(work: LeaseWork) -> LeaseResult:  # pragma: no cover - hosts carry every lease
        raise AssertionError("a lease ran as a Spark job of its own")

    flow = FakeFlow({0: (A,), 1: (B, C)})
    settings = LeaseSettings(lease_seconds=0.3, fence_seconds=0.2, renew_in_place=True)
    sched = LeaseScheduler({"f": flow}, no_job, settings, collect_host=hosts.collect,  # type: ignore[arg-type]
                           wanted_hosts=lambda: 2)
    assert sched.hosts is not None
    pool = sched.hosts
    await sched.start()
    try:
        # two hosts, one lease each (PLACE_LIGHTEST), both granted
        await _until(lambda: sched.leases_running() == 2, sched, "two leases running")
        assert pool.started == 2
        first = {h: list(v) for h, v in hosts.placed.items()}
        assert sorted(len(v) for v in first.values()) == [1, 1]

        # renewal: each successor goes to its predecessor's host (no lighter host), its
        # hand-over carries the released position, and the ended lease's figures come back
        await _until(lambda: sched.table.carried_over >= 2, sched, "two renewals")
        for host_id, leases in hosts.placed.items():
            tasks = {sched.table.leases[lease].task_id for lease in leases if lease in sched.table.leases}
            assert len(tasks) == 1, f"{host_id} ran leases of several tasks: {leases}"
        assert flow.absorbed and flow.absorbed[0].metrics.records == 3 and flow.absorbed[0].granted
        assert pool.started == 2  # renewals start no Spark job

        # a host is lost: its leases are lost once, their task is leased again on the other host,
        # and a new host is submitted in its place
        victim = next(h for h, leases in hosts.placed.items() if any(
            sched.table.leases[x].task_id == 1 for x in leases if x in sched.table.leases))
        hosts.kill(victim)
        await _until(lambda: flow.failed, sched, "the lost host's lease reported lost")
        assert "mirror host" in flow.failed[0] and victim in flow.failed[0]
        await _until(lambda: any(x.task_id == 1 and x.state is LeaseState.RUNNING
                                 and pool.host_of(x.lease_id) is not None
                                 and pool.host_of(x.lease_id).host_id != victim  # type: ignore[union-attr]
                                 for x in sched.table.leases.values()), sched, "task 1 on another host")
        await _until(lambda: pool.started == 3, sched, "a host in the lost one's place")
    finally:
        await sched.stop(timeout=5)
    assert pool.running() == 0 or all(not h.live for h in pool.hosts.values())


async def test_a_host_that_joins_takes_a_lease_at_once_and_the_hosts_even_out() -> None:
    """With one host both tasks' leases run there; a second host joins (an executor was added):
    one lease moves to it at once, and the other stays. Leases past their length are not renewed
    in place: a renewal on the host a lease already runs on gains nothing."""
    hosts = FakeHosts()
    wanted = [1]

    def no_job(work: LeaseWork) -> LeaseResult:  # pragma: no cover - hosts carry every lease
        raise AssertionError("a lease ran as a Spark job of its own")

    flow = FakeFlow({0: (A,), 1: (B,)})
    sched = LeaseScheduler({"f": flow}, no_job, LeaseSettings(lease_seconds=0.05),  # type: ignore[dict-item]
                           collect_host=hosts.collect, wanted_hosts=lambda: wanted[0])
    assert sched.hosts is not None
    pool = sched.hosts
    await sched.start()
    try:
        await _until(lambda: sched.leases_running() == 2, sched, "two leases running")
        assert [len(v) for v in hosts.placed.values()] == [2]  # one host carries both
        wanted[0] = 2
        await _until(lambda: len(hosts.placed) == 2 and sched.leases_running() == 2
                     and all(h.load == 1 for h in pool.hosts.values()), sched, "one lease on each host")
        for _ in range(20):  # and it stays even: no lease moves back and forth
            await sched.step()
            await asyncio.sleep(0.01)
        assert sched.started == 3 and sorted(len(v) for v in hosts.placed.values()) == [1, 2]
    finally:
        await sched.stop(timeout=5)


async def test_four_leases_even_out_over_a_joining_host_in_two_moves_and_stay() -> None:
    """Four equal leases on one host; a second host joins. Moves decided while another is still
    handing over would count the moving lease on both hosts and send leases back and forth (each
    move a task start: a new producer id and an offset sync per partition). One move at a time:
    exactly two leases move, and then none."""
    hosts = FakeHosts()
    wanted = [1]

    def no_job(work: LeaseWork) -> LeaseResult:  # pragma: no cover - hosts carry every lease
        raise AssertionError("a lease ran as a Spark job of its own")

    parts = [TopicPartition("orders", p) for p in range(8)]
    flow = FakeFlow({i: (parts[2 * i], parts[2 * i + 1]) for i in range(4)})
    sched = LeaseScheduler({"f": flow}, no_job, LeaseSettings(),  # type: ignore[dict-item]
                           collect_host=hosts.collect, wanted_hosts=lambda: wanted[0])
    assert sched.hosts is not None
    pool = sched.hosts
    await sched.start()
    try:
        await _until(lambda: sched.leases_running() == 4, sched, "four leases running")
        assert sched.started == 4
        wanted[0] = 2
        await _until(lambda: len(hosts.placed) == 2 and sched.leases_running() == 4
                     and sorted(h.load for h in pool.hosts.values()) == [4, 4],
                     sched, "two leases on each host")
        for _ in range(30):  # and it stays even
            await sched.step()
            await asyncio.sleep(0.01)
        assert sched.started == 6, f"{sched.started - 4} moves for two"
        assert sorted(h.load for h in pool.hosts.values()) == [4, 4]
        # HOSTS_PACE_AS_ONE: every lease paces as one process of the flow's eight partitions,
        # whether placed before the second host was counted or after (one configuration: the
        # leases on a host share one fetch session)
        assert hosts.pacing == [8] * 6
    finally:
        await sched.stop(timeout=5)


def _on_two_hosts(flow: FakeFlow, hosts: FakeHosts,
                  failed: dict[str, int]) -> tuple[LeaseScheduler, HostPool]:
    """A scheduler placing ``flow``'s leases on two of ``hosts``, a minute's fence (a lost lease is
    given up only when Spark counts its host's attempt failed: ``failed``, host id -> count)."""

    def no_job(work: LeaseWork) -> LeaseResult:  # pragma: no cover - hosts carry every lease
        raise AssertionError("a lease ran as a Spark job of its own")

    sched = LeaseScheduler({"f": flow}, no_job, LeaseSettings(fence_seconds=30.0),  # type: ignore[dict-item]
                           collect_host=hosts.collect, wanted_hosts=lambda: 2,
                           failed_host_attempts=lambda host_id: failed.get(host_id, 0))
    assert sched.hosts is not None
    return sched, sched.hosts


async def test_a_host_spark_gave_up_on_loses_its_leases_at_once_not_after_the_fence() -> None:
    """SPARK_GAVE_UP: a host's connection closes and its Spark job does not end (Spark lost the
    executor and runs the task again elsewhere). While Spark counts no failed attempt of it, its
    lease is fenced as before (held until two fence intervals of silence: a minute here); once
    Spark counts the host's attempt failed, the lease is given up and its task leased again on the
    other host, long before the fence."""
    hosts = FakeHosts()
    failed: dict[str, int] = {}  # host id -> failed attempts of its Spark task, as Spark counts
    flow = FakeFlow({0: (A,), 1: (B, C)})
    sched, pool = _on_two_hosts(flow, hosts, failed)
    await sched.start()
    try:
        await _until(lambda: sched.leases_running() == 2 and len(pool.placed_ids()) == 2, sched,
                     "two leases running")
        lease = next(x for x in sched.table.leases.values() if x.task_id == 1)
        victim = pool.host_of(lease.lease_id)
        assert victim is not None
        hosts.kill(victim.host_id, job_goes_on=True)
        await _until(lambda: victim.hung_up, sched, "the host's connection closed")
        for _ in range(20):  # Spark counts no failed attempt: the lease stays fenced, holding
            await sched.step()  # its partitions (a successor on the other host may wait for them)
            await asyncio.sleep(0.02)
        assert not lease.state.ended and not flow.failed
        assert sched.table.holder("f", B) == lease.lease_id
        failed[victim.host_id] = 1  # Spark gave up on the attempt (attempt 0) the host said HELLO in
        await _until(lambda: lease.state is LeaseState.LOST, sched, "the lease given up")
        assert "Spark lost its executor" in flow.failed[0] and victim.host_id in flow.failed[0]
        await _until(lambda: any(x.task_id == 1 and x.state is LeaseState.RUNNING
                                 and pool.host_of(x.lease_id) not in (None, victim)
                                 for x in sched.table.leases.values()), sched, "task 1 on the other host")
    finally:
        for event in hosts.retrying.values():
            event.set()
        await sched.stop(timeout=5)


async def test_every_lease_of_a_lost_host_gets_its_successor_on_a_live_host_at_once() -> None:
    """HOST_LOST: the moment a host's connection closes, each lease on it gets a successor on a
    live host, all at once (not one move at a time: a lease on a gone host is no move that could
    go back and forth), each built and waiting for its predecessor to be given up; then each is
    granted its partitions at once."""
    hosts = FakeHosts()
    failed: dict[str, int] = {}
    sched, pool = _on_two_hosts(FakeFlow({0: (A,), 1: (B,), 2: (C,)}), hosts, failed)
    await sched.start()
    try:
        await _until(lambda: sched.leases_running() == 3 and len(pool.placed_ids()) == 3
                     and len(pool.hosts) == 2 and not sched._hand_over_under_way(), sched,
                     "three leases running on two hosts")
        victim = max(pool.hosts.values(), key=lambda h: len(h.leases))
        survivor = next(h for h in pool.hosts.values() if h is not victim)
        lost = [sched.table.leases[x] for x in victim.leases]
        assert len(lost) == 2
        hosts.kill(victim.host_id, job_goes_on=True)
        await _until(lambda: victim.hung_up, sched, "the host's connection closed")

        def successors() -> list[str]:
            return [x.lease_id for x in sched.table.leases.values() if not x.state.ended
                    and x.task_id in {lease.task_id for lease in lost} and x not in lost
                    and pool.host_of(x.lease_id) is survivor]

        await _until(lambda: len(successors()) == 2, sched, "a successor for each lease of the lost host")
        assert all(not lease.state.ended for lease in lost)  # still fenced: the successors wait
        failed[victim.host_id] = 1
        await _until(lambda: all(sched.table.leases[x].state is LeaseState.RUNNING for x in successors()),
                     sched, "both successors granted")
    finally:
        for event in hosts.retrying.values():
            event.set()
        await sched.stop(timeout=5)


async def test_a_host_says_its_own_figures_and_the_driver_shows_them_per_host() -> None:
    """The real host (``run_host``, here in this process: its connections' request counts are this
    process's) says HOST_STATS every stats interval; the driver keeps each host's last and its
    /metrics shows them per host, with the leases and partitions placed on it."""
    from types import SimpleNamespace

    from mm2py.client.request_counts import REQUESTS
    from mm2py.protocol.api import ApiKey
    from mm2py.runtime.spark.executor.host import run_host
    from tests.support.worker_metrics import samples

    def no_job(work: LeaseWork) -> LeaseResult:  # pragma: no cover - no lease in this test
        raise AssertionError("a lease ran as a Spark job of its own")

    def fetched(figures: Any) -> int:
        return int(sum(f.requests.get(("east-figures", int(ApiKey.FETCH)), 0) for f in figures))

    REQUESTS.add("east-figures", ApiKey.FETCH)
    sched = LeaseScheduler({"f": FakeFlow({})}, no_job, LeaseSettings(),  # type: ignore[dict-item]
                           collect_host=run_host, wanted_hosts=lambda: 1)
    assert sched.hosts is not None
    pool = sched.hosts
    await sched.start()
    try:
        await _until(lambda: fetched(pool.figures()) >= 1, sched, "the host's first HOST_STATS")
        [first] = pool.figures()
        assert first.cpu_seconds > 0 and first.rss_bytes > 0 and (first.leases, first.partitions) == (0, 0)
        REQUESTS.add("east-figures", ApiKey.FETCH)  # said again: the driver's figure follows
        await _until(lambda: fetched(pool.figures()) >= fetched([first]) + 1, sched, "the next HOST_STATS")
        worker = SimpleNamespace(flows={}, codec_operations=lambda: (0, 0), host_figures=pool.figures)
        shown = samples(worker, "mm2py_host_requests_total")
        key = (("api", "Fetch"), ("cluster", "east-figures"), ("executor", first.executor),
               ("host", first.host))
        assert shown[key] == fetched(pool.figures())
        assert samples(worker, "mm2py_host_cpu_seconds_total")[(("executor", first.executor),
                                                                ("host", first.host))] > 0
    finally:
        await sched.stop(timeout=5)
