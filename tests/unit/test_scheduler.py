"""The named-job scheduler every periodic loop runs on (pure asyncio, no broker)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

import pytest

from mm2py.engine.scheduler import Scheduler, sleep_or_stop


def test_jobs_run_in_turn_again_after_their_interval_and_a_failure_does_not_stop_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []
    failures: list[tuple[str, str]] = []

    async def main() -> None:
        stop = asyncio.Event()
        jobs = Scheduler("east->west", stop, on_failure=lambda name, exc: failures.append((name, str(exc))))

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
