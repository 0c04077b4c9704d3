"""A warning repeated on every retry is logged once, then once per interval with a count."""

from __future__ import annotations

import logging

from mm2py.engine.task_contract import THROTTLE_KEY, SinkError
from mm2py.protocol.errors_codes import BrokerError
from mm2py.protocol.types import TopicPartition
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


def test_two_causes_or_two_partitions_are_never_folded_into_one_line() -> None:
    """The same template and task, but what each line is about differs (its ``throttle_key``: a
    refusal's cause and partition): each kind passes; repeats of one kind are still held back."""
    f = RepeatFilter(interval=60, clock=lambda: 0.0)
    produce_failed = "task %s: produce failed, %s: %s"

    def line(key: str, reason: str) -> logging.LogRecord:
        r = record(produce_failed, 0, "retrying from the last acknowledged batch", reason)
        setattr(r, THROTTLE_KEY, key)
        return r

    too_large = line("MESSAGE_TOO_LARGE on east.a-0", "Kafka error 10: MESSAGE_TOO_LARGE")
    invalid = line("INVALID_RECORD on east.b-1", "Kafka error 87: INVALID_RECORD")
    elsewhere = line("MESSAGE_TOO_LARGE on east.a-1", "Kafka error 10: MESSAGE_TOO_LARGE")
    assert [f.filter(r) for r in (too_large, invalid, elsewhere)] == [True, True, True]
    assert not f.filter(line("INVALID_RECORD on east.b-1", "Kafka error 87: INVALID_RECORD (again)"))


def test_a_task_names_each_failed_produce_by_its_cause_and_partitions() -> None:
    """What the task's warning is keyed by: the broker error's name and the failed partitions (not
    the message, which changes from retry to retry)."""
    a, b = TopicPartition("east.a", 0), TopicPartition("east.b", 1)

    def failed(code: int, *partitions: TopicPartition, detail: str = "") -> SinkError:
        try:
            raise SinkError("x", [], partitions=partitions) from BrokerError(code, detail)
        except SinkError as exc:
            return exc

    assert failed(10, a).kind == "MESSAGE_TOO_LARGE on east.a-0"
    assert failed(10, a, detail="once").kind == failed(10, a, detail="twice").kind
    assert len({failed(10, a).kind, failed(87, a).kind, failed(10, b).kind, failed(10, a, b).kind}) == 4
