"""Repeated warnings, once a minute: a logging filter for a worker's log handler.

While a cluster stays unreachable the same few warnings come back on every retry (a produce
failed, a commit failed, a fetch failed), several times a second per task. :class:`RepeatFilter`
lets the first through and then one per ``interval`` for each *kind* of line — its logger, its
message template, its first argument (a task id, a flow name) and what the line says it is about
when it says so (the ``throttle_key`` of its ``extra``: a failed produce's cause and partitions,
``SinkError.kind``) — with the number held back meanwhile, so the log says what is wrong at once
and then at a slow, steady pace, and two different problems are never folded into one line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from mm2py.engine.task_contract import THROTTLE_KEY

__all__ = ["RepeatFilter", "install"]


class RepeatFilter(logging.Filter):
    def __init__(self, interval: float = 60.0, level: int = logging.WARNING,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval = interval
        self.level = level  # lines below it always pass
        self.clock = clock
        self._last: dict[tuple[str, str, str, str], tuple[float, int]] = {}  # kind -> (logged at, held back)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return True
        first = record.args[0] if isinstance(record.args, tuple) and record.args else ""
        kind = (record.name, str(record.msg), str(first), str(getattr(record, THROTTLE_KEY, "")))
        now = self.clock()
        with self._lock:
            logged_at, held = self._last.get(kind, (float("-inf"), 0))
            if now - logged_at < self.interval:
                self._last[kind] = (logged_at, held + 1)
                return False
            self._last[kind] = (now, 0)
            if len(self._last) > 10_000:  # kinds are few; never grow without bound
                self._last.clear()
        if held:
            record.msg = f"{record.msg} (and {held} more like it in the last {self.interval:.0f}s)"
        return True


def install(interval: float = 60.0) -> RepeatFilter:
    """Add a :class:`RepeatFilter` to every handler of the root logger (after ``basicConfig``)."""
    repeat = RepeatFilter(interval)
    for handler in logging.getLogger().handlers:
        handler.addFilter(repeat)
    return repeat
