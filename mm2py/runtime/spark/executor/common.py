"""What both kinds of executor work (leases and rounds) share: the warnings sent back to the driver.

This module does not import pyspark: executors only need mm2py and its dependencies.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

#: the most warnings a lease or round sends back to the driver
_MAX_WARNINGS = 5


class _Warnings(logging.Handler):
    """The last warnings the task code logged during a lease or round (they go back to the driver)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.messages.append(f"{record.name}: {record.getMessage()}"[:500])
            del self.messages[:-_MAX_WARNINGS]


@contextlib.contextmanager
def capture_warnings() -> Iterator[list[str]]:
    """The last warnings the task code logs inside the block (they go back to the driver)."""
    warnings = _Warnings()
    loggers = [logging.getLogger(name) for name in ("mm2py",)]
    for lg in loggers:
        lg.addHandler(warnings)
    try:
        yield warnings.messages
    finally:
        for lg in loggers:
            lg.removeHandler(warnings)
