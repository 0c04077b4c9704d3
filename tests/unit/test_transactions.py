"""read_committed filtering over a sequence of batches, as a Java consumer would see them."""

from __future__ import annotations

import struct

import pytest

from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.record_codec import Record, build_batch
from mm2py.protocol.records import RecordBatch, iter_batches
from mm2py.protocol.transactions import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    AbortedTransactionFilter,
    control_record_type,
)

TS = 1_700_000_000_000


class Log:
    """Appends batches at consecutive offsets, like a partition log."""

    def __init__(self) -> None:
        self.next = 0
        self.data: list[bytes] = []

    def data_batch(self, pid: int, n: int = 2, transactional: bool = True) -> int:
        base = self.next
        recs = [Record(i, 0, None, f"{pid}@{base + i}".encode()) for i in range(n)]
        self.data.append(
            build_batch(recs, base_offset=base, base_timestamp=TS, producer_id=pid,
                        producer_epoch=0, base_sequence=0, transactional=transactional)
        )
        self.next += n
        return base

    def marker(self, pid: int, ctype: int) -> int:
        base = self.next
        key = struct.pack(">hh", 0, ctype)
        value = struct.pack(">hi", 0, 5)  # version, coordinator epoch
        self.data.append(
            build_batch([Record(0, 0, key, value)], base_offset=base, base_timestamp=TS,
                        producer_id=pid, producer_epoch=0, transactional=True, control=True)
        )
        self.next += 1
        return base

    def accepted(self, aborted: list[tuple[int, int]]) -> list[str]:
        f = AbortedTransactionFilter(aborted)
        out = []
        for b in iter_batches(b"".join(self.data)):
            if f.accept(b):
                out.append(f"{b.producer_id}@{b.base_offset}")
        return out


def test_committed_transaction_is_accepted_marker_is_not() -> None:
    log = Log()
    a = log.data_batch(1)
    b = log.data_batch(1)
    log.marker(1, CONTROL_COMMIT)
    assert log.accepted([]) == [f"1@{a}", f"1@{b}"]


def test_aborted_transaction_is_dropped_until_its_abort_marker() -> None:
    log = Log()
    first = log.data_batch(1)
    log.data_batch(1)
    log.marker(1, CONTROL_ABORT)
    later = log.data_batch(1)  # a new transaction of the same producer, committed
    log.marker(1, CONTROL_COMMIT)
    assert log.accepted([(1, first)]) == [f"1@{later}"]
    # without the aborted list (read_uncommitted-like input), everything non-control passes
    assert log.accepted([]) == [f"1@{first}", f"1@{first + 2}", f"1@{later}"]


def test_interleaved_producers() -> None:
    log = Log()
    p1a = log.data_batch(1)
    p2a = log.data_batch(2)
    p1b = log.data_batch(1)
    p3 = log.data_batch(3, transactional=False)
    log.marker(2, CONTROL_COMMIT)
    p2b = log.data_batch(2)
    log.marker(1, CONTROL_ABORT)
    p1c = log.data_batch(1)
    log.marker(2, CONTROL_ABORT)
    log.marker(1, CONTROL_COMMIT)
    got = log.accepted([(1, p1a), (2, p2b)])
    assert got == [f"2@{p2a}", f"3@{p3}", f"1@{p1c}"]
    assert f"1@{p1b}" not in got


def test_range_opens_only_when_first_offset_is_reached() -> None:
    log = Log()
    committed = log.data_batch(1)
    log.marker(1, CONTROL_COMMIT)
    aborted = log.data_batch(1, n=3)
    log.marker(1, CONTROL_ABORT)
    # first_offset inside the batch (not at its base) still opens the range for that batch
    assert log.accepted([(1, aborted + 1)]) == [f"1@{committed}"]
    assert log.accepted([(1, aborted)]) == [f"1@{committed}"]


def test_non_transactional_batches_of_an_aborted_producer_pass() -> None:
    log = Log()
    first = log.data_batch(1)
    plain = log.data_batch(1, transactional=False)
    log.marker(1, CONTROL_ABORT)
    assert log.accepted([(1, first)]) == [f"1@{plain}"]


def test_commit_marker_does_not_close_an_aborted_range() -> None:
    log = Log()
    first = log.data_batch(1)
    log.marker(1, CONTROL_COMMIT)  # malformed history, but the filter must follow Java's rule
    second = log.data_batch(1)
    log.marker(1, CONTROL_ABORT)
    third = log.data_batch(1)
    assert log.accepted([(1, first)]) == [f"1@{third}"]
    assert f"1@{second}" not in log.accepted([(1, first)])


def test_control_record_type() -> None:
    log = Log()
    log.marker(4, CONTROL_ABORT)
    log.marker(4, CONTROL_COMMIT)
    log.data_batch(4)
    abort, commit, data = (RecordBatch(d) for d in log.data)
    assert control_record_type(abort) == 0
    assert control_record_type(commit) == 1
    with pytest.raises(CorruptBatchError):
        control_record_type(data)
    short = RecordBatch(build_batch([Record(0, 0, b"\x00", None)], base_timestamp=TS, control=True))
    with pytest.raises(CorruptBatchError):
        control_record_type(short)
