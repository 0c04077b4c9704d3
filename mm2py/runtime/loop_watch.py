"""A watchdog for the worker's event loop: reports when it stops turning, and where it was.

Every mirror task of the in-process runtime shares one asyncio event loop, so anything that holds
it (a slow callback, a long garbage collection, another thread keeping the GIL) delays every
partition at once: a burst in the replication-latency tail. :class:`LoopWatch` ticks on the loop
every ``interval`` seconds; a thread beside it looks when ``threshold`` seconds have passed since
the last tick, and notices when no tick came,
takes the loop thread's stack at that moment (and the other threads' innermost frames: one of them
may hold the GIL), and once the loop turns again logs one WARNING with the stall's length and those
stacks (at most one such WARNING a minute: the stalls in between are counted, and the next WARNING
says how many and the longest). It also says how much of the stall the loop thread spent on the
CPU (all of it: a callback computing, or a garbage collection; little: the thread was not running,
waiting for a CPU or for the GIL) and how much in garbage collections. Stalls are counted
(``stalls``, ``stalled_seconds``, ``longest``) for the metrics.

:func:`freeze_start_up_heap` removes one cause: full collections over the objects of start-up.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable

__all__ = ["LoopWatch", "freeze_start_up_heap"]

log = logging.getLogger(__name__)


def freeze_start_up_heap() -> None:
    """Keep the objects of start-up (modules, classes, the REST app, a task's clients: ~75k in a
    worker) out of every later garbage collection: a full collection scanning them stalls the event
    loop for ~50 ms, a replication-latency spike every time the collector decides on one (seen as
    bursts in p99/max under live traffic). No collection first: start-up leaves next to no garbage
    (a collection there finds a few dozen objects) and would cost ~30 ms before the first fetch."""
    gc.freeze()


class LoopWatch:
    """``interval``: half of ``threshold`` by default (a stall is measured to within it).

    What watching costs is wake-ups, in an idle worker most of its CPU: each tick is one timer
    callback on the loop (no task, no future), and the thread sleeps until ``threshold`` after the
    last tick, the first moment a stall can be seen, so it wakes about once per tick or less
    rather than at every tick. An idle loop watched this way costs 0.6% of a CPU, against 1.5%
    with a coroutine ticking every 25 ms and the thread polling at the same pace; at 2,000
    partitions that thread alone was 4% of an in-process worker's CPU under trickling traffic."""

    def __init__(self, threshold: float = 0.1, interval: float | None = None, report_every: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self.interval = threshold / 2 if interval is None else interval
        #: at most one WARNING this often (with its stacks); the stalls between are counted and
        #: the next WARNING says how many there were and the longest (a loaded machine stalls often)
        self.report_every = report_every
        self._clock = clock
        self._reported_at = float("-inf")
        self._held: tuple[int, float] = (0, 0.0)  # stalls not reported since, the longest of them
        #: stalls seen (the loop did not tick for ``threshold`` seconds or more)
        self.stalls = 0
        self.stalled_seconds = 0.0
        self.longest = 0.0
        #: the last stall: (seconds, of which the loop thread ran on a CPU, of which in GC)
        self.last: tuple[float, float, float] | None = None
        self._last_tick = time.monotonic()
        self._last_cpu = 0.0  # the loop thread's CPU time at the last tick
        self._gc_started = 0.0
        self._gc_seconds = 0.0  # time in garbage collections (any thread), all along
        self._gc_at_tick = 0.0
        self._stack: str | None = None  # taken by the thread during the current stall
        self._loop_thread = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticker: asyncio.TimerHandle | None = None  # the next tick
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Start watching the running loop (call from it)."""
        self._loop_thread = threading.get_ident()
        self._last_tick = time.monotonic()
        self._last_cpu = time.thread_time()
        gc.callbacks.append(self._on_gc)
        self._loop = asyncio.get_running_loop()
        self._ticker = self._loop.call_later(self.interval, self._tick)
        self._thread = threading.Thread(target=self._watch, name="loop-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._ticker is not None:
            self._ticker.cancel()

    def _tick(self) -> None:
        now, cpu, in_gc = time.monotonic(), time.thread_time(), self._gc_seconds
        gap = now - self._last_tick
        if gap >= self.threshold:
            self._report(gap, cpu - self._last_cpu, in_gc - self._gc_at_tick)
        self._last_tick, self._last_cpu, self._gc_at_tick = now, cpu, in_gc
        if not self._stop.is_set() and self._loop is not None:
            self._ticker = self._loop.call_later(self.interval, self._tick)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started:
            self._gc_seconds += time.perf_counter() - self._gc_started

    def _report(self, gap: float, cpu: float, in_gc: float) -> None:
        self.stalls += 1
        self.stalled_seconds += gap
        self.longest = max(self.longest, gap)
        self.last = (gap, cpu, in_gc)
        where, self._stack = self._stack, None
        now = self._clock()
        if now - self._reported_at < self.report_every:
            held, longest = self._held
            self._held = (held + 1, max(longest, gap))
            log.debug("event loop stalled for %.0f ms", gap * 1000)
            return
        held, longest = self._held
        self._reported_at, self._held = now, (0, 0.0)
        since = (f" ({held} more stall(s) since the last report, the longest {longest * 1000:.0f} ms)"
                 if held else "")
        log.warning("event loop stalled for %.0f ms (every task waited)%s; the loop thread ran on a CPU "
                    "for %.0f ms of it, garbage collection took %.0f ms; it was in:\n%s",
                    gap * 1000, since, cpu * 1000, in_gc * 1000,
                    where or "(not caught: the watch thread did not run during the stall)")

    def _watch(self) -> None:
        wait = self.threshold
        while not self._stop.wait(wait):
            since = time.monotonic() - self._last_tick
            if since < self.threshold:  # ticked meanwhile: no stall can be seen before then
                wait = self.threshold - since
                continue
            if self._stack is None:  # stalled: where the loop is, once per stall
                self._stack = self._stacks()
            wait = self.interval

    def _stacks(self) -> str:
        frames = sys._current_frames()
        loop = frames.get(self._loop_thread)
        lines = ["  loop thread:"]
        if loop is not None:
            lines += ["    " + ln for ln in traceback.format_stack(loop, limit=8)]
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in frames.items():
            if ident in (self._loop_thread, threading.get_ident()):
                continue
            code = frame.f_code
            name = names.get(ident, ident)
            lines.append(f"  thread {name}: {code.co_filename}:{frame.f_lineno} {code.co_name}")
        return "\n".join(lines)
