"""Batch-granular ``read_committed`` filtering of a Fetch response partition.

A read_committed Fetch returns data below the last stable offset plus the list of aborted
transactions ``(producer_id, first_offset)`` that overlap it. Like the Java consumer, this filter
walks the batches in offset order: an aborted range of a producer opens once a batch's last offset
reaches ``first_offset``; while it is open, that producer's transactional batches are dropped; the
producer's ABORT control batch closes it. Control batches are never accepted.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable

from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.record_codec import decode_records
from mm2py.protocol.records import RecordBatch

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "AbortedTransactionFilter",
    "control_record_type",
]

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")


def control_record_type(batch: RecordBatch) -> int:
    """Type of the control record in a control batch: 0 = ABORT, 1 = COMMIT (others possible).

    The control record key is ``int16 version, int16 type``. Raises :class:`CorruptBatchError`
    for a non-control batch or a missing / short key.
    """
    if not batch.is_control:
        raise CorruptBatchError(f"batch at offset {batch.base_offset} is not a control batch")
    records = decode_records(batch)
    if not records:
        raise CorruptBatchError(f"control batch at offset {batch.base_offset} has no record")
    key = records[0].key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptBatchError(
            f"control batch at offset {batch.base_offset} has an invalid control record key"
        )
    _version, ctype = _CONTROL_KEY.unpack_from(key, 0)
    return int(ctype)


class AbortedTransactionFilter:
    """Decide, batch by batch in offset order, what a read_committed consumer would see."""

    __slots__ = ("_aborted_pids", "_pending")

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        # Min-heap on first_offset of the ranges not opened yet.
        self._pending: list[tuple[int, int]] = [(first, pid) for pid, first in aborted]
        heapq.heapify(self._pending)
        self._aborted_pids: set[int] = set()

    @property
    def open_aborted_producers(self) -> frozenset[int]:
        """Producers whose aborted range is currently open."""
        return frozenset(self._aborted_pids)

    def accept(self, batch: RecordBatch) -> bool:
        last = batch.last_offset
        pending = self._pending
        while pending and pending[0][0] <= last:
            self._aborted_pids.add(heapq.heappop(pending)[1])
        pid = batch.producer_id
        if batch.is_control:
            if pid in self._aborted_pids and control_record_type(batch) == CONTROL_ABORT:
                self._aborted_pids.discard(pid)
            return False
        return not (batch.is_transactional and pid in self._aborted_pids)
