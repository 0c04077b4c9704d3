"""One partition's produce lane: its queue, its unacknowledged batches (the bytes sent, re-sent as
they are) and its window. Bookkeeping only, no I/O: :mod:`.pipeline` sends and reads answers.

The invariants (IN-ORDER, WINDOW, DEEP, PROBE, RE-SEND, STOPPED, ONE-PRODUCER-ID) are stated in
:mod:`.pipeline`'s docstring; each is named here where the lane keeps it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from mm2py.client.producer.requests import REMEMBERED
from mm2py.client.producer.results import LaneStoppedError, PartitionFailure
from mm2py.protocol.batch_edit import for_produce, increment_sequence
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from mm2py.retry import Backoff

__all__ = ["Entry", "Lane", "stopped_error"]


@dataclass(eq=False, slots=True)
class Entry:
    """One submitted batch and, once sent, the producer fields and bytes it went out with."""

    tp: TopicPartition
    batch: RecordBatch
    future: asyncio.Future[int]
    pid: int = -1
    epoch: int = -1
    seq: int = -1
    data: bytes = b""  # the Produce bytes: a re-send sends these again (RE-SEND)
    attempts: int = 0  # times sent
    rewinds: int = -1  # the lane's rewinds when its last attempt went out

    def stamp(self, pid: int, epoch: int, seq: int) -> None:
        self.pid, self.epoch, self.seq = pid, epoch, seq
        self.data = for_produce(self.batch, pid, epoch, seq, verify=False)

    @property
    def next_seq(self) -> int:
        return increment_sequence(self.seq, self.batch.records_count)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


@dataclass(slots=True)
class Lane:
    """One partition's batches: ``queue`` (never sent) and ``unacked`` (sent, not acknowledged)."""

    home: int = 0  # the connection to the leader dealt to the lane: used when a pass is large (SHARE)
    slot: int = 0  # IN-ORDER: the connection its attempts in flight went on (another only with none)
    queue: deque[Entry] = field(default_factory=deque)
    #: sent and not acknowledged, in sequence order: what the lane re-sends (RE-SEND)
    unacked: deque[Entry] = field(default_factory=deque)
    #: how many of ``unacked`` (a prefix) went out since the last rewind; all of them are in flight
    sent: int = 0
    inflight: int = 0  # attempts not answered yet, since any rewind (IN-ORDER)
    #: bumped when the lane goes back to its first unacknowledged batch: older answers are stale
    rewinds: int = 0
    node: int = -1  # the broker the attempts since the last rewind go to
    conn: object = None  # IN-ORDER: the connection it goes on (a new one only after a rewind)
    pid: int = -1  # the producer id of ``unacked`` (ONE-PRODUCER-ID)
    next_seq: int = 0  # the sequence of the next batch taken from ``queue``
    #: DEEP: batches that may be on the broker unanswered since the last failure (0 once a batch
    #: sent after it is acknowledged: the broker and we agree again)
    unsure: int = 0
    #: the broker forgot our producer id here: ``unacked`` goes out again under the new id
    restamp: bool = False
    #: STOPPED: the failure reported to the caller, until the caller has seen it (``resume``)
    stopped: PartitionFailure | None = None
    #: resumed after a failure in doubt: the broker may hold batches we no longer have, so a
    #: refusal of ours cannot be answered with a new producer id (until an acknowledgment)
    blind: bool = False
    #: a batch was acknowledged while an earlier one was not (both may be on the broker)
    gap: bool = False
    trouble_since: float | None = None  # the first retriable failure since the last acknowledgment
    retry_at: float = 0.0  # no attempt before (backoff; 0: none due)
    #: the delays before the re-sends of this trouble: the cluster's retry back-off, doubling (a
    #: new one when a trouble begins with a retry; none waited before that)
    backoff: Backoff = field(default_factory=lambda: Backoff(0.0, 0.0))

    # ------------------------------------------------------------------------------- state
    @property
    def stale(self) -> int:
        """Attempts from before the last rewind still in flight (those since are ``sent``)."""
        return self.inflight - self.sent

    def has_work(self) -> bool:
        return self.sent < len(self.unacked) or bool(self.queue)

    def next_size(self) -> int:
        """The bytes of the batch :meth:`take` returns next (the lane has work)."""
        e = self.unacked[self.sent] if self.sent < len(self.unacked) else self.queue[0]
        return len(e.batch.buf)

    def take(self, pid: int, epoch: int, sequence: int) -> Entry:
        """The next batch to send (RE-SEND: an unacknowledged one first, as it was, or re-stamped
        under ``pid`` from ``sequence`` when the broker forgot our id here; else the next queued
        one under the lane's producer id), marked in flight since the last rewind."""
        if self.sent < len(self.unacked):
            if self.restamp and self.sent == 0:
                self.pid, self.next_seq, self.restamp = pid, sequence, False
                for e in self.unacked:
                    e.stamp(pid, epoch, self.next_seq)
                    self.next_seq = e.next_seq
            e = self.unacked[self.sent]
        else:
            e = self.queue.popleft()
            e.stamp(self.pid, epoch, self.next_seq)
            self.next_seq = e.next_seq
            self.unacked.append(e)
        e.attempts += 1
        e.rewinds = self.rewinds
        self.sent += 1
        self.inflight += 1
        return e

    def answered(self, e: Entry) -> bool:
        """An answer came for ``e``'s attempt; whether it counts (not from before the last rewind)."""
        self.inflight -= 1
        return e.rewinds == self.rewinds

    def acknowledged(self, e: Entry) -> None:
        """``e`` is on the broker (and every batch before it): the broker and we agree again."""
        self.gap = self.gap or e is not self.unacked[0]
        self.unacked.remove(e)
        self.sent -= 1
        self.unsure = 0
        self.blind = False
        self.trouble_since = None
        if not self.unacked:
            self.gap = False

    def sequence_after_prefix(self) -> int:
        """The sequence right after the acknowledged prefix (of the lane's producer id)."""
        return self.unacked[0].seq if self.unacked else self.next_seq

    def rewind(self) -> None:
        """RE-SEND: from the first unacknowledged batch again, once the attempts out are answered.
        DEEP: each of them may be on the broker."""
        self.unsure = max(self.unsure, len(self.unacked))
        self.rewinds += 1
        self.sent = 0

    def in_doubt(self, refused: Entry | None) -> bool:
        """Whether batches past the acknowledged prefix may be on the broker: any unacknowledged
        batch may, but one ``refused`` by the broker the only time it was sent."""
        return self.blind or self.gap or self.inflight > 0 or any(
            e is not refused or e.attempts > 1 for e in self.unacked
        )

    def surely_refused(self, e: Entry) -> bool:
        """WAIT: whether the broker's refusal of ``e`` leaves nothing past the acknowledged prefix
        on it: ``e`` is the first unacknowledged batch, sent once (a refusal of a re-send says
        nothing of an earlier attempt: the broker checks the in-sync replicas before it looks for
        a duplicate), and no failure in doubt came before. The batches after it were sent behind
        it on one connection, so the broker refuses them too (out of sequence, or for the same
        reason): they can only be in flight, not appended."""
        return e is self.unacked[0] and e.attempts == 1 and not (self.blind or self.gap)

    def stop(self, tp: TopicPartition, cause: BaseException, refused: Entry | None = None,
             *, surely: bool = False) -> list[Entry]:
        """STOPPED: report ``cause``; every batch not acknowledged fails (returned, to be failed by
        the caller: the first with ``cause``, the others as stopped), the sequence goes back to
        right after the acknowledged prefix, and nothing more is sent until :meth:`resume`
        (``surely``: :meth:`surely_refused` held for ``refused``, so not in doubt; the attempts
        still out are answered before the lane sends again, IN-ORDER)."""
        failure = PartitionFailure(cause, False if surely else self.in_doubt(refused))
        self.stopped = failure
        self.blind = self.blind or failure.in_doubt
        self.rewind()
        failed = [*self.unacked, *self.queue]
        self.unacked.clear()
        self.queue.clear()
        self.gap = False
        self.trouble_since = None
        return failed

    def resume(self) -> None:
        self.stopped = None
        self.restamp = False

    def refusal(self, tp: TopicPartition, why: str) -> str:
        """DEEP: why the lane's first unacknowledged batch may not be sent again."""
        held = (f"up to {self.unsure} batches may be on the broker unanswered, more than it remembers "
                f"({REMEMBERED})" if self.unsure > REMEMBERED else
                "a later batch was acknowledged, so the first unanswered one is on the broker" if self.gap
                else "batches a failure in doubt left may be on the broker")
        return (f"{tp}: {held}, and a batch cannot be sent again safely ({why}); what the partition "
                f"holds must be read from it")


def stopped_error(tp: TopicPartition, cause: BaseException) -> LaneStoppedError:
    return LaneStoppedError(f"{tp}: not sent or not known to be appended, an earlier batch failed: "
                            f"{cause}")
