"""Continuous idempotent produce: every partition's window stays full across calls.

:meth:`ProducePipeline.submit` queues batches per partition, in order, and returns a future per
batch (its target base offset). A single pump task sends them: each Produce request carries the
next batch of every partition led by that broker that may send, so a caller that submits the next
fetch's batches before the previous ones are acknowledged keeps the window full (nothing drains at
a call boundary).

Invariants (each named where it is kept):

``IN-ORDER``
    A partition's batches are written in submission order, all of its in-flight batches on one
    connection (a lane whose leader changed waits until its in-flight batches are answered; a lane
    keeps its connection slot for life), so the broker appends them in order.
``WINDOW``
    At most ``window`` batches of a partition are in flight. The broker remembers a producer's
    last five batches per partition (``REMEMBERED``): any of them sent again with the same
    sequence is recognised as a duplicate, an older one is refused as out of sequence.
``DEEP``
    A window over five is allowed (it carries more bytes per round trip across a long link), at
    this price: a failure may leave more than five of a partition's batches on the broker
    unanswered (the lane's ``unsure`` count), and re-sending the first of them is then refused.
    That refusal, or a new producer id before the re-send, fails the batch with
    :class:`ResendRefusedError` and leaves the producer id alone: taking a new id and sending
    again would append what the broker holds twice. The caller must find out from the partition
    what it holds (the mirror task restarts and resumes exactly from the target's tail).
``PROBE``
    A partition not confirmed (see :mod:`.state`) has one batch in flight, alone, until it is
    acknowledged: a broker that does not know our producer there would take any sequence.
``HALT``
    A partition's first failed batch halts it: its queued batches fail at once without being sent
    and its later in-flight batches are reported failed whatever the broker answers (the result is
    a prefix: acknowledged up to the first failure). Its sequence goes back to right after the
    prefix, and nothing more of it is sent until the caller, having seen the failure, calls
    :meth:`resume` (it re-sends from the acknowledged prefix; what the broker did append of the
    failed batches is then answered by its duplicate detection, see ``WINDOW``).
``ONE-PRODUCER-ID``
    A partition's in-flight batches all carry the same producer id: after the id was replaced
    (the broker forgot it), a partition sends again only once its in-flight batches are answered,
    and starts unconfirmed under the new id at sequence 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mm2py.client.connection import BrokerConnection
from mm2py.client.errors import ClientError, NoLeaderError, ResendRefusedError
from mm2py.client.producer.requests import MAX_WINDOW, REMEMBERED, ProduceRequests
from mm2py.client.producer.state import ProducerState, producer_state_lost
from mm2py.protocol.api import ProducePartitionResponse
from mm2py.protocol.batch_edit import for_produce, increment_sequence
from mm2py.protocol.errors_codes import NONE, BrokerError, invalidates_metadata
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

__all__ = ["PartitionHaltedError", "ProducePipeline", "acknowledged_prefix"]

log = logging.getLogger(__name__)


class PartitionHaltedError(ClientError):
    """Not appended (or not known to be): an earlier batch of the partition failed (``HALT``)."""


@dataclass(eq=False, slots=True)
class _Entry:
    tp: TopicPartition
    batch: RecordBatch
    future: asyncio.Future[int]
    seq: int = -1  # set when sent
    pid: int = -1
    #: sent after a batch of its partition that failed: reported failed whatever the answer
    doomed: bool = False


@dataclass(slots=True)
class _Lane:
    """One partition's queue and window."""

    queue: deque[_Entry] = field(default_factory=deque)  # submitted, not sent
    inflight: deque[_Entry] = field(default_factory=deque)  # sent, not answered, in send order
    next_seq: int = 0  # guards IN-ORDER/WINDOW: the sequence of the next batch sent
    node: int = -1  # the broker the in-flight batches went to
    slot: int = 0  # IN-ORDER: which of the connections to that broker (fixed for the lane's life)
    pid: int = -1  # the producer id of the in-flight batches (ONE-PRODUCER-ID)
    halted: BaseException | None = None  # the first failure the caller has not resumed from
    #: DEEP: batches that may be on the broker unanswered since the last failure (0 once a batch
    #: sent after it is acknowledged: the broker and we agree again)
    unsure: int = 0
    no_leader_since: float | None = None


class ProducePipeline:
    """Batches of many partitions, produced continuously with idempotence (see the module doc)."""

    def __init__(
        self, state: ProducerState, requests: ProduceRequests, window: int, connections: int = 1
    ) -> None:
        if not 1 <= window <= MAX_WINDOW:
            raise ValueError(f"window must be 1..{MAX_WINDOW}")
        if connections < 1:
            raise ValueError("connections must be >= 1")
        self.state = state
        self.requests = requests
        self.window = window
        #: connections per broker; the partitions are dealt to them in turn as they first appear,
        #: so a broker validates and appends several requests of ours at once (one per connection)
        #: instead of one after another, which shortens every window's cycle across a long link
        self.connections = connections
        self._lanes: dict[TopicPartition, _Lane] = {}
        self._wake = asyncio.Event()
        self._pump_task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._refresh: asyncio.Task[None] | None = None
        self._closed = False

    # ------------------------------------------------------------------------------ callers
    def submit(self, items: Sequence[tuple[TopicPartition, RecordBatch]]) -> list[asyncio.Future[int]]:
        """Queue normalized batches (in order per partition); a future per batch, in input order.

        A future fails with :class:`PartitionHaltedError` when its partition is halted (``HALT``),
        or with the broker's or the connection's error for the batch that failed first."""
        if self._closed:
            raise ClientError("producer closed")
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[int]] = []
        for tp, batch in items:
            lane = self._lanes.get(tp)
            if lane is None:
                lane = self._lanes[tp] = _Lane(slot=len(self._lanes) % self.connections)
            entry = _Entry(tp, batch, loop.create_future())
            futures.append(entry.future)
            if lane.halted is not None:
                entry.future.set_exception(_halted(tp, lane.halted))
            else:
                lane.queue.append(entry)
        self._ensure_pump()
        self._wake.set()
        return futures

    def halted(self) -> dict[TopicPartition, BaseException]:
        """Partitions halted by a failure, and the failure."""
        return {tp: lane.halted for tp, lane in self._lanes.items() if lane.halted is not None}

    def resume(self, partitions: Sequence[TopicPartition] | None = None) -> None:
        """Let halted partitions send again (from right after their acknowledged prefix)."""
        for tp in list(self._lanes) if partitions is None else partitions:
            lane = self._lanes.get(tp)
            if lane is not None:
                lane.halted = None
        self._wake.set()

    async def close(self) -> None:
        self._closed = True
        tasks = [t for t in (self._pump_task, self._refresh, *self._requests) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        for tp, lane in self._lanes.items():
            for e in (*lane.inflight, *lane.queue):
                if not e.future.done():
                    e.future.set_exception(ClientError(f"producer closed before {tp} was answered"))
        self._lanes.clear()

    # ------------------------------------------------------------------------------- pump
    def _ensure_pump(self) -> None:
        if self._pump_task is None or self._pump_task.done():
            self._pump_task = asyncio.create_task(self._pump_loop(), name="produce-pipeline")

    async def _pump_loop(self) -> None:
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._pump()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # e.g. no producer id: fail what waits, the caller retries
                log.debug("produce pipeline: %r", exc)
                for tp, lane in self._lanes.items():
                    if lane.queue and lane.halted is None:
                        self._halt(tp, lane, exc)

    async def _pump(self) -> None:
        """Send what may be sent now (one request per connection and pass, passes until none is left)."""
        pid, epoch = await self.state.ensure()
        while True:
            groups = self._sendable(pid)
            if not groups:
                return
            for (node, slot), lanes in groups.items():
                try:
                    conn = await self.requests.cluster.connection(node, slot)
                except Exception as exc:  # unreachable leader: fail its partitions' queued batches
                    self.requests.cluster.invalidate({tp.topic for tp, _ in lanes})
                    for tp, lane in lanes:
                        self._halt(tp, lane, exc)
                    continue
                self._send(conn, node, lanes, pid, epoch)
            await asyncio.sleep(0)  # let the requests be written before the next pass

    def _sendable(self, pid: int) -> dict[tuple[int, int], list[tuple[TopicPartition, _Lane]]]:
        """The lanes that may send a batch now, by (leader, connection slot)."""
        groups: dict[tuple[int, int], list[tuple[TopicPartition, _Lane]]] = {}
        cluster = self.requests.cluster
        for tp, lane in self._lanes.items():
            if not lane.queue or lane.halted is not None:
                continue
            leader = cluster.leader_of(tp)
            if leader is None:
                self._wait_for_leader(tp, lane)
                continue
            lane.no_leader_since = None
            if lane.inflight:
                if lane.inflight[0].doomed:
                    continue  # HALT: resumed, but the failed batches are not all answered yet
                limit = self.window if self.state.confirmed(tp) else 1  # WINDOW, PROBE
                if lane.pid != pid or lane.node != leader or len(lane.inflight) >= limit:
                    continue  # ONE-PRODUCER-ID, IN-ORDER: wait until answered
            else:
                if lane.unsure > REMEMBERED and lane.pid not in (-1, pid):  # DEEP
                    self._refuse(tp, lane, f"our producer id changed from {lane.pid} to {pid}")
                    continue
                lane.node, lane.pid = leader, pid
                lane.next_seq = self.state.sequence(tp)  # right after the acknowledged prefix
            groups.setdefault((leader, lane.slot), []).append((tp, lane))
        return groups

    def _send(
        self, conn: BrokerConnection, node: int, lanes: list[tuple[TopicPartition, _Lane]],
        pid: int, epoch: int,
    ) -> None:
        """One request (or more, by size) with the next batch of each of ``lanes``."""
        sent: dict[TopicPartition, _Entry] = {}
        data: dict[TopicPartition, bytes] = {}
        for tp, lane in lanes:
            e = lane.queue.popleft()
            e.seq, e.pid = lane.next_seq, pid
            lane.next_seq = increment_sequence(e.seq, e.batch.records_count)
            lane.inflight.append(e)
            sent[tp] = e
            data[tp] = for_produce(e.batch, pid, epoch, e.seq, verify=False)
        for chunk in self.requests.chunks(data):
            entries = {tp: sent[tp] for tp in chunk}
            # a request is written when its task first runs, and tasks run in creation order
            task = asyncio.create_task(self._request(conn, chunk, entries))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    async def _request(
        self, conn: BrokerConnection, chunk: Mapping[TopicPartition, bytes],
        entries: Mapping[TopicPartition, _Entry],
    ) -> None:
        try:
            res: Mapping[TopicPartition, ProducePartitionResponse | BaseException]
            res = await self.requests.request(conn, chunk)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the whole request failed: connection lost, time-out
            res = {tp: exc for tp in entries}
        for tp, e in entries.items():
            self._answer(e, res.get(tp, BrokerError(-1, f"no result for {tp}")))
        self._wake.set()

    # ---------------------------------------------------------------------------- outcomes
    def _answer(self, e: _Entry, out: ProducePartitionResponse | BaseException) -> None:
        lane = self._lanes.get(e.tp)
        if lane is None:
            return  # closed
        with contextlib.suppress(ValueError):
            lane.inflight.remove(e)
        if e.doomed:  # HALT: whatever the broker answered
            _fail(e, _halted(e.tp, lane.halted or ClientError("halted")))
            return
        if isinstance(out, ProducePartitionResponse) and out.error_code == NONE:
            lane.unsure = 0  # DEEP: the broker holds what we think, up to this batch
            if e.pid == self.state.producer_id:
                self.state.set_sequence(e.tp, increment_sequence(e.seq, e.batch.records_count))
            if not e.future.done():
                e.future.set_result(out.base_offset)
            return
        lost = isinstance(out, ProducePartitionResponse) and producer_state_lost(out.error_code)
        cause = _cause(e.tp, out)
        if lost and lane.unsure > REMEMBERED:  # DEEP: the broker may be past it, not forgetful
            cause = ResendRefusedError(_refused(e.tp, lane.unsure, str(cause)))
            lost = False
        self._halt(e.tp, lane, cause, first=e)
        _fail(e, cause)
        if not isinstance(out, ProducePartitionResponse) or invalidates_metadata(out.error_code):
            self.requests.cluster.invalidate({e.tp.topic})
        if lost:
            self.state.forget(e.pid)  # ONE-PRODUCER-ID: the next batches wait for a new id

    def _halt(
        self, tp: TopicPartition, lane: _Lane, cause: BaseException, first: _Entry | None = None
    ) -> None:
        """HALT: fail the queue, doom the batches in flight after ``first``, rewind the sequence.
        DEEP: ``first`` and those in flight may all be on the broker."""
        if lane.halted is None:
            lane.halted = cause
            log.debug("%s halted: %r", tp, cause)
        lane.unsure = max(lane.unsure, len(lane.inflight) + (first is not None))
        for e in lane.inflight:
            e.doomed = True
        while lane.queue:
            e = lane.queue.popleft()
            _fail(e, _halted(tp, cause))
        if first is not None:
            lane.next_seq = first.seq

    def _refuse(self, tp: TopicPartition, lane: _Lane, why: str) -> None:
        """DEEP: the next batch cannot be sent again safely; fail it and halt the partition."""
        cause = ResendRefusedError(_refused(tp, lane.unsure, why))
        _fail(lane.queue.popleft(), cause)
        self._halt(tp, lane, cause)

    def _wait_for_leader(self, tp: TopicPartition, lane: _Lane) -> None:
        """No leader known: refresh metadata in the background; give up after the retry time-out."""
        now = time.monotonic()
        if lane.no_leader_since is None:
            lane.no_leader_since = now
        elif now - lane.no_leader_since > self.requests.config.retry_timeout_s:
            lane.no_leader_since = None
            self._halt(tp, lane, NoLeaderError(f"no leader known for {tp}"))
            return
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.create_task(self._refresh_metadata({tp.topic}))

    async def _refresh_metadata(self, topics: set[str]) -> None:
        cluster = self.requests.cluster
        cluster.invalidate(topics)
        await asyncio.sleep(cluster.config.retry_backoff_s)
        with contextlib.suppress(ClientError):
            await cluster.refresh_metadata(topics)
        self._wake.set()


def acknowledged_prefix(
    partitions: Sequence[TopicPartition], outcomes: Sequence[int | BaseException]
) -> tuple[list[int], dict[TopicPartition, BaseException]]:
    """The submitted batches' outcomes (``partitions[i]`` is batch i's) as what the caller may
    count: each partition's acknowledged prefix (base offsets, -1 from its first failure on) and
    each failed partition's first failure."""
    offsets = [-1] * len(outcomes)
    failed: dict[TopicPartition, BaseException] = {}
    for i, (tp, out) in enumerate(zip(partitions, outcomes, strict=True)):
        if isinstance(out, BaseException):
            failed.setdefault(tp, out)
        elif tp not in failed:
            offsets[i] = out
    return offsets, failed


def _fail(e: _Entry, exc: BaseException) -> None:
    if not e.future.done():
        e.future.set_exception(exc)


def _halted(tp: TopicPartition, cause: BaseException) -> PartitionHaltedError:
    return PartitionHaltedError(f"{tp}: not sent or not known to be appended, an earlier batch "
                                f"failed: {cause}")


def _refused(tp: TopicPartition, unsure: int, why: str) -> str:
    return (f"{tp}: up to {unsure} batches may be on the broker unanswered, more than it remembers "
            f"({REMEMBERED}), and a batch cannot be sent again safely ({why}); what the partition "
            f"holds must be read from it")


def _cause(tp: TopicPartition, out: ProducePartitionResponse | BaseException) -> BaseException:
    if isinstance(out, BaseException):
        return out
    return BrokerError(out.error_code, f"produce to {tp}: {out.error_message or ''}")
