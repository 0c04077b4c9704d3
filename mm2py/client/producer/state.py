"""The idempotent producer's state: our producer id and epoch, and per partition the next sequence
number and when the broker last acknowledged one of our batches there.

The broker dedupes a retried batch by (producer id, epoch, sequence). When it has forgotten our
producer (UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER after expiry, INVALID_PRODUCER_EPOCH),
the state is reset: a new id is taken and every partition's sequence starts again at 0.

A partition is "confirmed" while a recent acknowledgment proves the broker holds our producer
state there: a broker that does not know the producer on a partition accepts ANY sequence number
(ProducerAppendInfo.checkSequence), so pipelining is only safe on confirmed partitions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from mm2py.protocol.errors_codes import (
    INVALID_PRODUCER_EPOCH,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    UNKNOWN_PRODUCER_ID,
)
from mm2py.protocol.types import TopicPartition

__all__ = ["CONFIRMED_FOR_S", "PRODUCER_STATE_LOST", "ProducerState", "producer_state_lost"]

log = logging.getLogger(__name__)

#: error codes saying the broker no longer agrees on our producer state for the partition: start
#: over with a new producer id (the one table of these codes)
PRODUCER_STATE_LOST = frozenset({UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH})
#: an acknowledgment older than this no longer proves the broker holds our producer state (brokers
#: drop idle producers after producer.id.expiration.ms, 1 day by default; operators may lower it)
CONFIRMED_FOR_S = 300.0

#: asks the cluster for a new (producer id, epoch)
InitProducerId = Callable[[], Awaitable[tuple[int, int]]]


def producer_state_lost(code: int) -> bool:
    """Whether a partition's error code means the broker has forgotten our producer state."""
    return code in PRODUCER_STATE_LOST


class ProducerState:
    def __init__(self, init_producer_id: InitProducerId) -> None:
        self._init_producer_id = init_producer_id
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences: dict[TopicPartition, int] = {}
        #: partition -> when a batch was last acknowledged under the current producer id
        self._confirmed: dict[TopicPartition, float] = {}
        self._lock = asyncio.Lock()

    def sequence(self, tp: TopicPartition) -> int:
        """The sequence number the partition's next batch gets."""
        return self._sequences.get(tp, 0)

    def set_sequence(self, tp: TopicPartition, sequence: int) -> None:
        """Record an acknowledged batch: the partition's next sequence; the broker now knows us."""
        self._sequences[tp] = sequence
        self._confirmed[tp] = time.monotonic()

    def confirmed(self, tp: TopicPartition) -> bool:
        """Whether the broker surely holds our producer state for the partition (safe to pipeline)."""
        at = self._confirmed.get(tp)
        return at is not None and time.monotonic() - at < CONFIRMED_FOR_S

    async def ensure(self) -> tuple[int, int]:
        """Our (producer id, epoch), taking a new id first if we have none."""
        if self.producer_id >= 0:
            return self.producer_id, self.producer_epoch
        async with self._lock:
            if self.producer_id < 0:
                pid, epoch = await self._init_producer_id()
                self.producer_id, self.producer_epoch = pid, epoch
                self._forget_partitions()
                log.info("producer id %d epoch %d", pid, epoch)
        return self.producer_id, self.producer_epoch

    async def reset(self, seen: int) -> None:
        """The broker forgot producer id ``seen``: drop it (unless already replaced) and every sequence."""
        async with self._lock:
            self.forget(seen)

    def forget(self, seen: int) -> None:
        """As :meth:`reset`, without waiting (while a new id is being taken, ``seen`` is not ours)."""
        if self.producer_id == seen and seen >= 0:
            log.warning("broker forgot producer id %d; taking a new one", seen)
            self.producer_id = self.producer_epoch = -1
            self._forget_partitions()

    def _forget_partitions(self) -> None:
        self._sequences.clear()
        self._confirmed.clear()
