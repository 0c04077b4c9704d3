"""librdkafka's log lines: each distinct problem once, then at most once per interval."""

from __future__ import annotations

import logging

import pytest

from mm2py.rdkafka.log import LibrdkafkaLog, problem_key

REFUSED = ("[thrd:127.0.0.1:{port}/bootstrap]: 127.0.0.1:{port}/bootstrap: Connect to ipv4#127.0.0.1:{port} "
           "failed: Connection refused (after {ms}ms in state CONNECT)")


def line(client: int, port: int = 1, ms: int = 0) -> tuple[int, str, str, str, str]:
    return logging.ERROR, "%s [%s] %s", "FAIL", f"rdkafka#producer-{client}", REFUSED.format(port=port, ms=ms)


def test_repeats_of_one_problem_from_many_clients_are_one_line_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    log = LibrdkafkaLog(logging.getLogger("test.rdkafka"), interval=60, clock=lambda: now[0])
    with caplog.at_level(logging.ERROR, "test.rdkafka"):
        for i in range(500):  # ~10 s of a refusing cluster, five clients
            now[0] = i * 0.02
            log.log(*line(client=i % 5, ms=i % 3))
        log.log(*line(client=1, port=2))  # another cluster: another problem
        assert len(caplog.records) == 2
        now[0] = 61.0
        log.log(*line(client=3))
    assert len(caplog.records) == 3
    assert "Connection refused" in caplog.records[0].getMessage()
    assert "127.0.0.1:2" in caplog.records[1].getMessage()
    assert "and 499 more like it in the last 60s" in caplog.records[2].getMessage()


def test_different_problems_are_not_merged() -> None:
    assert problem_key(line(1)[4]) == problem_key(line(2, ms=7)[4])
    assert problem_key(line(1, port=1)[4]) != problem_key(line(1, port=2)[4])


def test_lines_below_the_loggers_level_cost_nothing(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.rdkafka.quiet")
    logger.setLevel(logging.ERROR)
    log = LibrdkafkaLog(logger)
    with caplog.at_level(logging.ERROR, "test.rdkafka.quiet"):
        log.log(logging.DEBUG, "%s", "chatter")
        log.log(*line(1))
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
