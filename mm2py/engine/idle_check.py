"""Foreign writes seen while a partition is idle: the remote partitions' ends, asked now and then.

The ``target.*`` alarms compare where the target acknowledged each batch with where the mirror's
last batch ended, so a record another producer writes into a remote partition is named at the
mirror's next batch there, which on an idle partition may be never. :class:`IdleCheck` is the
task's collaborator that closes that gap (issue 46 item 4):

- **ONE_ASK_PER_INTERVAL**: every ``interval`` seconds (the flow's topic refresh interval) the
  task's idle partitions' remote ends are asked for in one ListOffsets per target broker (the
  sink's ``end_offsets``), in the background: the loop never waits on it;
- **IDLE_ONLY**: a partition counts as idle when everything handed to the sink was acknowledged
  and the target offset its next batch must land at is known; its answer is judged only if that is
  still so when the answer comes (no put moved it meanwhile), so a batch of the mirror's own in
  flight is never taken for a foreign write;
- an end past that offset is ``target.foreign``, one below it ``target.truncated`` (the same
  alarms and policies as at a batch's acknowledgement); under ``skip`` the partition's expected
  target offset becomes the end found, so one foreign write is named once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from mm2py.engine.losses import LossWatch, MirrorAlarmError
from mm2py.engine.task_contract import BatchSink
from mm2py.engine.task_positions import TaskPositions
from mm2py.protocol.types import TopicPartition

log = logging.getLogger(__name__)

__all__ = ["IdleCheck"]


class IdleCheck:
    """Asks the idle partitions' remote ends every ``interval`` seconds (None: never)."""

    def __init__(self, interval: float | None, clock: Callable[[], float]) -> None:
        if interval is not None and interval <= 0:
            raise ValueError(f"the idle check's interval must be positive, not {interval}")
        self.interval = interval
        self.clock = clock
        self._next = clock() + interval if interval else float("inf")
        #: the ask under way, and each asked partition's expected target offset when it was sent
        self._ask: asyncio.Future[dict[TopicPartition, int]] | None = None
        self._asked: dict[TopicPartition, int] = {}
        self.checks = 0  # answers judged so far

    def step(self, pos: TaskPositions, sink: BatchSink, losses: LossWatch) -> MirrorAlarmError | None:
        """Judge an answer that came, send the next ask when due; the alarm to raise under ``fail``."""
        alarm = None
        ask = self._ask
        if ask is not None and ask.done():
            self._ask = None
            alarm = self._judge(ask, pos, losses)
        if self._ask is None and self.clock() >= self._next:
            assert self.interval is not None
            self._next = self.clock() + self.interval
            acked, target_next = pos.acked, pos.target_next
            self._asked = {tp: t for tp in pos if (t := target_next[tp]) is not None
                           and pos.fetch_of(tp) == acked[tp]}
            if self._asked:
                self._ask = asyncio.ensure_future(sink.end_offsets(list(self._asked)))
        return alarm

    def _judge(self, ask: asyncio.Future[dict[TopicPartition, int]], pos: TaskPositions,
               losses: LossWatch) -> MirrorAlarmError | None:
        if ask.cancelled() or ask.exception() is not None:
            log.debug("the remote partitions' ends could not be asked for: %s",
                      "cancelled" if ask.cancelled() else ask.exception())
            return None
        self.checks += 1
        alarm = None
        for tp, end in ask.result().items():
            expected = self._asked.get(tp)
            if (expected is None or tp not in pos or pos.target_next[tp] != expected
                    or pos.fetch_of(tp) != pos.acked[tp] or end == expected):
                continue  # moved meanwhile (IDLE_ONLY), or as the mirror left it
            alarm = losses.target_end(tp, expected, end) or alarm
            if alarm is None:  # skip: named once, the partition goes on from what the target holds
                pos.retarget(tp, end)
        return alarm

    def close(self) -> None:
        if self._ask is not None:
            self._ask.cancel()
            self._ask = None
