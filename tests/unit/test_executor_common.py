"""mm2py.runtime.spark.executor.common: the warnings a lease or round sends back to the driver are
the last few the task code (``mm2py`` loggers) logged inside the block, and only those."""

from __future__ import annotations

import logging

from mm2py.runtime.spark.executor.common import _MAX_WARNINGS, capture_warnings


def test_the_last_warnings_of_mm2py_loggers_inside_the_block_are_kept() -> None:
    task_log = logging.getLogger("mm2py.engine.task")
    logging.getLogger("mm2py").warning("before the block")
    with capture_warnings() as warnings:
        task_log.info("not a warning")
        logging.getLogger("elsewhere").warning("not mm2py's")
        for i in range(_MAX_WARNINGS + 3):
            task_log.warning("partition %d resting", i)
        task_log.error("an error counts too")
    assert warnings == [f"mm2py.engine.task: partition {i} resting" for i in range(4, _MAX_WARNINGS + 3)] + [
        "mm2py.engine.task: an error counts too"]
    assert len(warnings) == _MAX_WARNINGS
    task_log.warning("after the block")
    assert warnings[-1] == "mm2py.engine.task: an error counts too", "captured after the block ended"


def test_a_long_message_is_cut() -> None:
    with capture_warnings() as warnings:
        logging.getLogger("mm2py.x").warning("y" * 2000)
    assert warnings == [("mm2py.x: " + "y" * 2000)[:500]]


def test_the_handler_is_removed_even_when_the_block_raises() -> None:
    handlers = list(logging.getLogger("mm2py").handlers)
    try:
        with capture_warnings():
            raise KeyError("boom")
    except KeyError:
        pass
    assert logging.getLogger("mm2py").handlers == handlers
