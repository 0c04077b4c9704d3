"""The event-loop watchdog: a callback that holds the loop is reported with its length and its stack."""

from __future__ import annotations

import asyncio
import logging
import re
import time

import pytest

from mm2py.runtime.loop_watch import LoopWatch


def hold_the_loop_for(seconds: float) -> None:
    time.sleep(seconds)  # what a slow callback does to every task of the loop


async def test_a_stall_is_counted_and_logged_with_where_the_loop_was(
    caplog: pytest.LogCaptureFixture) -> None:
    # every stall logged (report_every=0): on a loaded machine the loop also stalls when its
    # process waits for a CPU, and those are real stalls too, counted beside the one held here
    watch = LoopWatch(threshold=0.1, interval=0.01, report_every=0.0)
    watch.start()
    try:
        with caplog.at_level(logging.WARNING, logger="mm2py.runtime.loop_watch"):
            await asyncio.sleep(0.05)
            before = watch.stalls
            hold_the_loop_for(0.3)
            await asyncio.sleep(0.05)
    finally:
        watch.stop()
    assert watch.stalls >= before + 1 and 0.28 <= watch.longest < 1.0, (watch.stalls, watch.longest)
    (named,) = [r.getMessage() for r in caplog.records if "hold_the_loop_for" in r.getMessage()]
    told = re.search(r"stalled for (\d+) ms .* ran on a CPU for (\d+) ms", named)
    assert told is not None and 280 <= int(told[1]) < 1000, named
    assert int(told[2]) < 100, "a sleeping loop thread counted as running"


def spin_for(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def test_a_stall_spent_computing_shows_the_cpu_it_took() -> None:
    watch = LoopWatch(threshold=0.1, interval=0.01)
    # every stall reported: on a loaded machine the loop also stalls, without computing, before
    # or after the spin, so the spin's need not be the last
    reported: list[tuple[float, float, float]] = []
    report = watch._report

    def keep(gap: float, cpu: float, in_gc: float) -> None:
        reported.append((gap, cpu, in_gc))
        report(gap, cpu, in_gc)

    watch._report = keep  # type: ignore[method-assign]
    watch.start()
    try:
        await asyncio.sleep(0.05)
        spin_for(0.25)
        await asyncio.sleep(0.05)
    finally:
        watch.stop()
    assert watch.last == reported[-1]
    assert any(gap >= 0.24 and cpu >= 0.2 for gap, cpu, _ in reported), reported


async def test_stalls_are_reported_once_a_report_interval_the_others_counted(
    caplog: pytest.LogCaptureFixture) -> None:
    """A loaded machine stalls the loop often: one WARNING (with its stacks) per interval."""
    now = [0.0]
    watch = LoopWatch(threshold=0.05, interval=0.01, report_every=60.0, clock=lambda: now[0])

    async def held(seconds: float) -> None:
        # the next hold only once this one is counted: on a loaded machine a fixed sleep can end
        # before the watch's tick, and two holds would be one stall
        seen = watch.stalls
        hold_the_loop_for(seconds)
        async with asyncio.timeout(10):
            while watch.stalls == seen:
                await asyncio.sleep(0.005)

    watch.start()
    try:
        with caplog.at_level(logging.WARNING, logger="mm2py.runtime.loop_watch"):
            for seconds in (0.1, 0.2, 0.1):
                await held(seconds)
            before = watch.stalls  # 3, or more where the machine itself held the loop
            now[0] = 61.0  # a minute later
            await held(0.1)
    finally:
        watch.stop()
    assert before >= 3 and watch.stalls >= before + 1, (before, watch.stalls)
    warnings = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    assert len(warnings) == 2, warnings
    counted = re.search(r"\((\d+) more stall\(s\) since the last report, the longest (\d+) ms\)",
                        warnings[1])
    assert counted is not None, warnings[1]
    assert int(counted[1]) == before - 1 and int(counted[2]) >= 195, (before, warnings[1])
