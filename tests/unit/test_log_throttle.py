"""A warning repeated on every retry is logged once, then once per interval with a count."""

from __future__ import annotations

import logging

from mm2py.runtime.log_throttle import RepeatFilter


def record(msg: str, *args: object, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord("mm2py.engine.task", level, __file__, 1, msg, args, None)


def test_repeats_pass_once_per_interval_with_the_count_held_back() -> None:
    now = [0.0]
    f = RepeatFilter(interval=60, clock=lambda: now[0])
    produce_failed = "task %s: produce failed, retrying from the last acknowledged batch: %s"
    passed = []
    for i in range(120):  # a minute of retries every half second, two tasks
        now[0] = i * 0.5
        for task in (0, 1):
            r = record(produce_failed, task, f"connection refused ({i})")
            if f.filter(r):
                passed.append(r.getMessage())
    assert len(passed) == 2  # the first line of each task
    now[0] = 61.0
    r = record(produce_failed, 0, "connection refused (again)")
    assert f.filter(r)
    assert r.getMessage().endswith("(and 119 more like it in the last 60s)")
    assert "connection refused (again)" in r.getMessage()  # the latest reason is shown


def test_other_lines_and_lower_levels_are_left_alone() -> None:
    f = RepeatFilter(interval=60, clock=lambda: 0.0)
    assert f.filter(record("task %s: produce failed: %s", 0, "x"))
    assert f.filter(record("task %s: committing progress failed (%s); will retry", 0, "x"))
    assert all(f.filter(record("task %s: now mirroring %d partitions", 0, 3, level=logging.INFO))
               for _ in range(5))
