"""librdkafka's log lines into Python logging, without the flood.

librdkafka logs every failed connection attempt of every client: against a cluster that refuses
connections, a worker with a handful of confluent-kafka clients writes dozens of identical ERROR
lines a second. :class:`LibrdkafkaLog` (confluent-kafka's ``logger`` setting) writes each distinct
problem once, then at most once per ``interval`` with the number of lines held back meanwhile.
Lines are "the same problem" when they differ only in the client's name, the thread and the
milliseconds librdkafka counts (``[rdkafka#producer-3]``, ``[thrd:...]``, ``after 0ms``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LibrdkafkaLog", "problem_key"]

_CLIENT = re.compile(r"rdkafka#(producer|consumer)-\d+")
_THREAD = re.compile(r"\[thrd:[^\]]*\]:?\s*")
_MILLIS = re.compile(r"\d+ms")
#: at most this many distinct problems are remembered (the oldest are forgotten first)
_MAX_PROBLEMS = 1000


def problem_key(line: str) -> str:
    """``line`` without what changes between repeats of the same problem."""
    return _MILLIS.sub("Nms", _THREAD.sub("", _CLIENT.sub("rdkafka", line)))


@dataclass
class _Problem:
    logged_at: float
    held_back: int = 0


class LibrdkafkaLog:
    """A ``logger`` for confluent-kafka clients (it calls ``log(level, fmt, *args)`` from its threads)."""

    def __init__(self, logger: logging.Logger, interval: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval = interval
        self.clock = clock
        self._problems: dict[str, _Problem] = {}
        self._lock = threading.Lock()  # librdkafka logs from its own threads

    def log(self, level: int, fmt: str, *args: object) -> None:
        if not self.logger.isEnabledFor(level):
            return
        line = fmt % args if args else fmt
        key = problem_key(line)
        now = self.clock()
        with self._lock:
            problem = self._problems.get(key)
            if problem is not None and now - problem.logged_at < self.interval:
                problem.held_back += 1
                return
            held_back = problem.held_back if problem is not None else 0
            self._problems.pop(key, None)
            self._problems[key] = _Problem(now)
            while len(self._problems) > _MAX_PROBLEMS:
                del self._problems[next(iter(self._problems))]
        if held_back:
            line += f" (and {held_back} more like it in the last {self.interval:.0f}s)"
        self.logger.log(level, "%s", line)

    # logging.Logger's level methods, for callers that use them
    def error(self, msg: str, *args: object) -> None:
        self.log(logging.ERROR, msg, *args)

    def warning(self, msg: str, *args: object) -> None:
        self.log(logging.WARNING, msg, *args)
