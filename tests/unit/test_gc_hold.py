"""NO_COLLECTION_ON_LIBRDKAFKA_THREADS (``mm2py/client/oauth.py``): the collector stays off while a
token callback runs Python on a thread Python did not start (librdkafka's), its way out included,
and is switched on again by mm2py's own thread once the last one has left Python."""

from __future__ import annotations

import _thread
import gc
import threading
from collections.abc import Callable, Iterator

import pytest

from mm2py.client.oauth import _CollectionHold


@pytest.fixture
def hold() -> Iterator[_CollectionHold]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield _CollectionHold()
    finally:
        gc.enable() if was else gc.disable()


def until(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    pause = threading.Event()
    for _ in range(int(timeout / 0.005)):
        if cond():
            return True
        pause.wait(0.005)
    return cond()


class Callback:
    """A token callback on a thread Python did not start (as librdkafka's are): it enters, waits
    for ``come_out``, leaves, then still runs Python (its way out) until ``finish``."""

    def __init__(self, hold: _CollectionHold) -> None:
        self.hold = hold
        self.inside, self.come_out, self.left, self.finish = (threading.Event() for _ in range(4))
        _thread.start_new_thread(self._run, ())

    def _run(self) -> None:
        self.hold.enter()
        self.inside.set()
        self.come_out.wait(30)
        self.hold.leave()
        self.left.set()
        self.finish.wait(30)


def test_the_collector_stays_off_until_the_last_callback_has_left_python(hold: _CollectionHold) -> None:
    cb = Callback(hold)
    assert cb.inside.wait(30) and not gc.isenabled()
    cb.come_out.set()
    assert cb.left.wait(30)
    # out of the callback, but still in Python: a collection could start on its way out
    assert not until(gc.isenabled, timeout=0.2) and hold.held
    cb.finish.set()
    assert until(gc.isenabled) and not hold.held


def test_a_callback_coming_in_meanwhile_keeps_it_off_until_it_too_has_gone(hold: _CollectionHold) -> None:
    first = Callback(hold)
    assert first.inside.wait(30)
    first.come_out.set()
    assert first.left.wait(30)
    second = Callback(hold)
    assert second.inside.wait(30)
    first.finish.set()
    assert not until(gc.isenabled, timeout=0.2)  # the second is inside
    second.come_out.set()
    assert second.left.wait(30)
    assert not until(gc.isenabled, timeout=0.2)  # and still in Python
    second.finish.set()
    assert until(gc.isenabled) and not hold.held


def test_a_callback_on_a_thread_python_started_holds_nothing(hold: _CollectionHold) -> None:
    hold.enter()  # this test's own thread: a collection here cannot be librdkafka's own thread's
    assert gc.isenabled() and not hold.held
    hold.leave()
    assert gc.isenabled()


def test_a_collector_switched_off_by_someone_else_is_left_off(hold: _CollectionHold) -> None:
    gc.disable()
    cb = Callback(hold)
    assert cb.inside.wait(30)
    cb.come_out.set()
    cb.finish.set()
    assert cb.left.wait(30)
    assert not until(gc.isenabled, timeout=0.2) and not hold.held
