"""The named-job scheduler every periodic loop runs on (pure asyncio, no broker)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

import pytest

from mm2py.engine import scheduler as scheduler_module
from mm2py.engine.scheduler import Scheduler, sleep_or_stop


def test_jobs_run_in_turn_again_after_their_interval_and_a_failure_does_not_stop_the_loop(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a clock of the test's own (a wait moves it on at once): the order is the scheduler's, not
    a loaded machine's (a clean-clone run saw a fourth tick before the third tock on wall time)."""
    calls: list[str] = []
    failures: list[tuple[str, str]] = []
    now = [0.0]

    async def waited(stop: asyncio.Event, seconds: float) -> bool:
        now[0] += seconds
        await asyncio.sleep(0)
        return stop.is_set()

    monkeypatch.setattr(scheduler_module, "sleep_or_stop", waited)

    async def main() -> None:
        stop = asyncio.Event()
        jobs = Scheduler("east->west", stop, on_failure=lambda name, exc: failures.append((name, str(exc))),
                         clock=lambda: now[0])

        async def tick() -> None:
            calls.append("tick")
            if calls.count("tick") == 2:
                raise RuntimeError("cluster unreachable")

        async def tock() -> None:
            calls.append("tock")
            if calls.count("tock") >= 3:
                stop.set()

        jobs.every("tick", 0.01, tick)
        jobs.every("tock", 0.01, tock)
        await asyncio.wait_for(jobs.run(), 10)
        assert jobs.stats("tick") == (3, 1)

    with caplog.at_level(logging.DEBUG, logger="mm2py.engine.scheduler"):
        asyncio.run(main())
    assert calls == ["tick", "tock"] * 3  # added order, one at a time; the failed tick ran again
    assert failures == [("tick", "cluster unreachable")]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "east->west: tick failed" in warnings[0].getMessage()
    assert "cluster unreachable" in warnings[0].getMessage()
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    took = [m for m in debug if " took " in m]
    assert len(took) == 5 and all(m.startswith("east->west: t") and m.endswith(" s") for m in took)


def test_a_job_waits_its_interval_after_each_run_and_its_first_delay() -> None:
    starts: list[float] = []

    async def main() -> None:
        stop = asyncio.Event()
        jobs = Scheduler("flow", stop)

        async def job() -> None:
            starts.append(time.monotonic())
            await asyncio.sleep(0.05)  # the interval counts from the end of a run
            if len(starts) == 3:
                stop.set()

        began = time.monotonic()
        jobs.every("job", 0.1, job, delay=0.2)
        await asyncio.wait_for(jobs.run(), 10)
        assert starts[0] - began >= 0.2

    asyncio.run(main())
    assert len(starts) == 3
    assert all(b - a >= 0.15 for a, b in itertools.pairwise(starts))


def test_a_one_off_job_is_retried_until_it_works_then_leaves() -> None:
    attempts: list[int] = []

    async def main() -> None:
        stop = asyncio.Event()
        jobs = Scheduler("flow", stop)

        async def load() -> None:
            attempts.append(1)
            if len(attempts) < 3:
                raise OSError("not yet")

        jobs.once("load", load, retry=0.01)
        assert jobs.jobs == ["load"]
        await asyncio.wait_for(jobs.run(), 10)  # returns: nothing left to run
        assert jobs.jobs == []

    asyncio.run(main())
    assert len(attempts) == 3


def test_setting_stop_ends_the_loop_at_once_even_during_a_long_interval() -> None:
    async def main() -> float:
        stop = asyncio.Event()
        jobs = Scheduler("flow", stop)
        runs: list[int] = []

        async def job() -> None:
            runs.append(1)

        jobs.every("hourly", 3600, job)
        running = asyncio.create_task(jobs.run())
        await asyncio.sleep(0.1)
        stopped = time.monotonic()
        stop.set()
        await asyncio.wait_for(running, 5)
        assert runs == [1]
        return time.monotonic() - stopped

    assert asyncio.run(main()) < 2.0


def test_until_done_gives_up_when_stopped_and_sleep_or_stop_says_why_it_woke() -> None:
    async def main() -> None:
        stop = asyncio.Event()
        jobs = Scheduler("flow", stop)

        async def never() -> None:
            raise RuntimeError("down")

        asyncio.get_running_loop().call_later(0.1, stop.set)
        assert await asyncio.wait_for(jobs.until_done("connect", never, retry=0.02), 5) is False
        assert await sleep_or_stop(stop, 3600) is True
        assert await sleep_or_stop(asyncio.Event(), 0.01) is False

    asyncio.run(main())


def test_bad_schedules_are_refused() -> None:
    async def job() -> None:
        return None

    jobs = Scheduler("flow", asyncio.Event())
    with pytest.raises(ValueError, match="positive interval"):
        jobs.every("refresh", 0, job)
    jobs.every("refresh", 1, job)
    with pytest.raises(ValueError, match="already"):
        jobs.every("refresh", 1, job)
    with pytest.raises(ValueError, match="retry"):
        jobs.once("load", job, retry=0)
    with pytest.raises(ValueError, match="back-off"):
        jobs.once("load", job, retry=5, backoff=0.5)
    with pytest.raises(ValueError, match="longest retry"):
        jobs.once("load", job, retry=5, backoff=2, max_retry=1)


def test_a_one_off_job_backs_off_doubling_its_retry_delay_up_to_the_longest() -> None:
    """A flow's start retried while its cluster is down: first after 5 s, then 10, 20, 40, 60, 60."""
    now = [100.0]
    outcomes = iter([False] * 5 + [True])

    async def main() -> list[float | None]:
        jobs = Scheduler("east->west", asyncio.Event(), clock=lambda: now[0])

        async def start() -> None:
            if not next(outcomes):
                raise ConnectionRefusedError("cluster down")

        jobs.once("start", start, delay=5.0, retry=10.0, backoff=2.0, max_retry=60.0)
        waits: list[float | None] = []
        while (wait := await jobs.run_due()) is not None:
            waits.append(wait)
            now[0] += wait
            if len(waits) > 10:
                break
        waits.append(wait)
        return waits

    assert asyncio.run(main()) == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0, None]


def test_a_job_may_drop_itself_or_another_and_quiet_jobs_log_only_their_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    async def main() -> None:
        stop = asyncio.Event()
        jobs = Scheduler("flow", stop)

        async def poll() -> None:
            ran.append("poll")
            if ran.count("poll") == 2:
                raise RuntimeError("poll hiccup")
            if ran.count("poll") == 4:
                jobs.cancel("poll")

        async def first() -> None:
            ran.append("first")
            jobs.cancel("second")  # due in the same pass: it never runs

        async def second() -> None:
            ran.append("second")

        jobs.every("poll", 0.01, poll, quiet=True, retry=0.01)
        jobs.every("first", 3600, first)
        jobs.every("second", 3600, second)
        running = asyncio.create_task(jobs.run())
        for _ in range(200):
            if ran.count("poll") >= 4:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # a fifth poll would have run meanwhile
        assert jobs.jobs == ["first"]
        stop.set()
        await asyncio.wait_for(running, 5)

    with caplog.at_level(logging.DEBUG, logger="mm2py.engine.scheduler"):
        asyncio.run(main())
    assert ran[:2] == ["poll", "first"] and "second" not in ran and ran.count("poll") == 4
    messages = [r.getMessage() for r in caplog.records]
    assert not any(m.startswith("flow: poll took") for m in messages)
    assert any(m.startswith("flow: first took") for m in messages)
    assert any("flow: poll failed" in m and "poll hiccup" in m for m in messages)


def test_repeated_failures_are_held_back_per_job_not_per_owner(caplog: pytest.LogCaptureFixture) -> None:
    """The worker's log throttle lets the first failure of each job through, even when another job
    of the same owner (a flow's heartbeat, its delayed start) keeps failing meanwhile."""
    from mm2py.runtime.log_throttle import RepeatFilter

    async def main() -> None:
        stop = asyncio.Event()
        jobs = Scheduler("east->west", stop)

        async def down() -> None:
            raise ConnectionRefusedError("cluster down")

        jobs.every("emit heartbeat", 0.01, down)
        jobs.every("delayed start", 0.01, down)
        asyncio.get_running_loop().call_later(0.2, stop.set)
        await asyncio.wait_for(jobs.run(), 5)

    with caplog.at_level(logging.WARNING, logger="mm2py.engine.scheduler"):
        asyncio.run(main())
    throttle = RepeatFilter(interval=60)
    passed = [r.getMessage() for r in caplog.records if throttle.filter(r)]
    assert len(caplog.records) > 4
    assert [m.split(" failed")[0] for m in passed] == [
        "east->west: emit heartbeat", "east->west: delayed start"]
