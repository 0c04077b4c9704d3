"""Continuous idempotent produce: every partition's window stays full across calls, and each
partition's lane re-sends its own unacknowledged batches.

:meth:`ProducePipeline.submit` queues batches per partition, in order, and returns a future per
batch (its target base offset). A single pump task sends them: each Produce request carries the
next batch of every partition led by that broker that may send, so a caller that submits the next
fetch's batches before the previous ones are acknowledged keeps the window full (nothing drains at
a call boundary). Each partition has a lane (:mod:`.lanes`): its queue, and the batches it sent
and that are not acknowledged yet, kept as the bytes that went out.

Invariants (each named where it is kept):

``IN-ORDER``
    A partition's batches are written in sequence order, all of its in-flight batches on one
    connection (a lane whose leader changed waits until its in-flight batches are answered; a lane
    moves to another connection of the leader only with nothing in flight), so the broker appends
    them in order. A lane that goes back to its first unacknowledged batch sends nothing until
    every attempt already out is answered.
``SHARE``
    With several connections per broker, a pass's lanes that have nothing in flight share one
    request when their batches to that broker total under :data:`SHARED_PASS_BYTES` (a trickle
    over many partitions: one request per pass, not one per connection): on the connection this
    pass sends on anyway, else the one with the fewest requests out. A larger pass deals them to
    their home connections, so a backlog keeps the broker working on several requests at once.
``WINDOW``
    At most ``window`` batches of a partition are in flight. The broker remembers a producer's
    last five batches per partition (``REMEMBERED``): any of them sent again with the same
    sequence is recognised as a duplicate, an older one is refused as out of sequence.
``RE-SEND``
    After a retriable failure (connection lost, time-out, leader moved or unknown, any retriable
    error code) the lane waits for its attempts still out, backs off (the cluster's retry
    backoff, doubling up to its maximum; metadata refreshed when the failure says it is stale) and
    sends its unacknowledged batches again, in order, as the same bytes: same producer id, same
    sequence, whatever id the producer took since for other partitions, so the broker answers a
    batch it did append with that batch's offset (``WINDOW``). After the broker forgot our
    producer id on the partition, the lane sends them again under the new id from sequence 0
    (``ONE-PRODUCER-ID``) — unless that is unsafe (``DEEP``). The caller sees none of this: the
    futures stay pending. Only when the lane gives up — the producer's retry time-out since the
    last acknowledgment, a non-retriable error, a DEEP refusal — does the failure reach the caller.
``DEEP``
    A window over five is allowed (it carries more bytes per round trip across a long link), at
    this price: a failure may leave more than five of a partition's batches on the broker
    unanswered (the lane's ``unsure`` count), and re-sending the first of them is then refused.
    So is re-sending a batch whose answer was lost after a later one was acknowledged (the lane's
    ``gap``): the broker appends a producer's batches in sequence, so it holds the earlier one.
    That refusal fails the batch with :class:`ResendRefusedError` and leaves the producer id
    alone: taking a new id and sending again would append what the broker holds twice. The same
    holds after a failure in doubt was reported and the caller let the lane send again (the
    broker may hold batches the lane no longer has). The caller must find out from the partition
    what it holds (the mirror task restarts and resumes exactly from the target's tail).
``PROBE``
    A partition not confirmed (see :mod:`.state`) has one batch in flight, alone, until it is
    acknowledged: a broker that does not know our producer there would take any sequence.
``STOPPED``
    A lane that gave up is stopped: every batch of it not acknowledged fails (the first with the
    cause, the others with :class:`LaneStoppedError`), so the result is a prefix (acknowledged up
    to the first failure), with the failure's ``in_doubt`` (:mod:`.results`). Its sequence goes
    back to right after the prefix, and nothing later of it is appended until the caller, having
    seen the failure, calls :meth:`resume`; batches submitted meanwhile fail at once.
``WAIT``
    A refusal the broker may lift by itself (``NOT_ENOUGH_REPLICAS``: too few in-sync replicas for
    acks=all) of the lane's first unacknowledged batch, sent once, stops the lane at once, not in
    doubt (the lane's ``surely_refused``): the caller rests that partition alone, where retrying
    until the time-out would hold up every later put of the caller.
``THROTTLED``
    A broker that answered with a throttle time (a quota, :mod:`.throttle`) gets nothing until it ends.
``ONE-PRODUCER-ID``
    A partition's in-flight batches all carry the same producer id: after the id was replaced (the
    broker forgot it), a partition sends new batches only once those it sent under the old id are
    acknowledged, and starts unconfirmed under the new id at sequence 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence

from mm2py.client.connection import BrokerConnection
from mm2py.client.errors import ClientError, ResendRefusedError, is_retriable_error
from mm2py.client.producer.lanes import Entry, Lane, stopped_error
from mm2py.client.producer.leaders import LeaderWait
from mm2py.client.producer.requests import MAX_WINDOW, REMEMBERED, Answers, ProduceRequests
from mm2py.client.producer.state import ProducerState, producer_state_lost
from mm2py.client.producer.throttle import Throttles
from mm2py.protocol.api import ProducePartitionResponse
from mm2py.protocol.errors_codes import NONE, NOT_ENOUGH_REPLICAS, BrokerError, invalidates_metadata
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from mm2py.retry import Backoff

__all__ = ["ProducePipeline"]

log = logging.getLogger(__name__)

Answer = ProducePartitionResponse | BaseException

#: SHARE: a pass's idle lanes whose batches to a broker total less than this go in one request
SHARED_PASS_BYTES = 64 * 1024
#: WAIT: refusals the broker lifts by itself, reported at once when nothing is in doubt
WAIT_CODES = frozenset({NOT_ENOUGH_REPLICAS})


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
        #: connections per broker; each partition's home is dealt in turn as it first appears, so
        #: a broker validates and appends several large requests of ours at once (SHARE)
        self.connections = connections
        self._lanes: dict[TopicPartition, Lane] = {}
        #: the lanes that may have work (a pass walks these, not thousands of idle lanes): added on
        #: every submit, answer and resume, dropped by a pass that finds a lane without work
        self._busy: dict[TopicPartition, Lane] = {}
        self._wake = asyncio.Event()
        self._pump_task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._leaders = LeaderWait(requests, self._wake)  # lanes without a known leader
        self._closed = False
        self._answers = 0  # answers read so far (a lane ready before one came may not be after)
        self._out: dict[tuple[int, int], int] = {}  # SHARE: requests not answered per (leader, slot)
        #: THROTTLED: the brokers' quota throttling of our requests (nothing sent to one before it ends)
        self.throttles = Throttles()

    # ------------------------------------------------------------------------------ callers
    def submit(self, items: Sequence[tuple[TopicPartition, RecordBatch]]) -> list[asyncio.Future[int]]:
        """Queue normalized batches (in order per partition); a future per batch, in input order.

        A future fails only once its lane gave up (``RE-SEND``): with the cause for the first batch
        not acknowledged, :class:`LaneStoppedError` for the others (``STOPPED``)."""
        if self._closed:
            raise ClientError("producer closed")
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[int]] = []
        for tp, batch in items:
            lane = self._lanes.get(tp)
            if lane is None:
                home = len(self._lanes) % self.connections
                lane = self._lanes[tp] = Lane(home=home, slot=home)
            entry = Entry(tp, batch, loop.create_future())
            futures.append(entry.future)
            if lane.stopped is not None:
                entry.future.set_exception(stopped_error(tp, lane.stopped.cause))
            else:
                lane.queue.append(entry)
                self._busy[tp] = lane
        self._ensure_pump()
        self._wake.set()
        return futures

    def in_doubt(self, tp: TopicPartition) -> bool:
        """Whether the partition's reported failure may have left batches past its acknowledged
        prefix on the broker (True when it has none to tell: nothing can be ruled out)."""
        lane = self._lanes.get(tp)
        return lane is None or lane.stopped is None or lane.stopped.in_doubt

    def stopped(self) -> dict[TopicPartition, BaseException]:
        """Partitions stopped by a failure the caller has not acknowledged, and the failure."""
        return {tp: lane.stopped.cause for tp, lane in self._lanes.items() if lane.stopped is not None}

    def resume(self, partitions: Sequence[TopicPartition] | None = None) -> None:
        """The caller has seen the failures: stopped partitions may send again (from right after
        their acknowledged prefix)."""
        for tp in list(self._lanes) if partitions is None else partitions:
            lane = self._lanes.get(tp)
            if lane is not None:
                lane.resume()
                self._busy[tp] = lane
        self._wake.set()

    async def close(self) -> None:
        self._closed = True
        tasks = [t for t in (self._pump_task, self._leaders.refresh, *self._requests) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        for tp, lane in self._lanes.items():
            for e in (*lane.unacked, *lane.queue):
                e.fail(ClientError(f"producer closed before {tp} was answered"))
        self._lanes.clear()
        self._busy.clear()

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
            except Exception as exc:  # no producer id (asked for until the retry time-out)
                log.debug("produce pipeline: %r", exc)
                for tp, lane in self._lanes.items():
                    if lane.stopped is None and lane.has_work():
                        self._stop(tp, lane, exc)

    async def _pump(self) -> None:
        """Send what may be sent now (one request per connection and pass, passes until none is left)."""
        while True:
            pid, epoch = await self.state.ensure()
            groups: dict[tuple[int, int], list[tuple[TopicPartition, Lane]]] = {}
            idle: dict[int, list[tuple[TopicPartition, Lane]]] = {}  # by leader: nothing in flight
            for tp, lane in list(self._busy.items()):
                if not lane.has_work():
                    del self._busy[tp]
                elif (leader := self._ready(tp, lane, pid)) is not None:
                    if lane.inflight or self.connections == 1:  # IN-ORDER
                        groups.setdefault((leader, lane.slot), []).append((tp, lane))
                    else:
                        idle.setdefault(leader, []).append((tp, lane))
            for leader, lanes in idle.items():
                self._deal(leader, lanes, groups)
            if not groups:
                return
            answers = self._answers
            for (node, slot), lanes in groups.items():
                try:
                    conn = await self.requests.cluster.connection(node, slot)
                except Exception as exc:  # unreachable leader: its partitions try again later
                    self.requests.cluster.invalidate({tp.topic for tp, _ in lanes})
                    for tp, lane in lanes:
                        if is_retriable_error(exc):
                            self._retry(tp, lane, exc)
                        else:
                            self._stop(tp, lane, exc)
                    continue
                self._send(conn, (node, slot), lanes, pid, epoch, recheck=self._answers != answers)
            await asyncio.sleep(0)  # let the requests be written before the next pass

    def _deal(
        self, leader: int, lanes: list[tuple[TopicPartition, Lane]],
        groups: dict[tuple[int, int], list[tuple[TopicPartition, Lane]]],
    ) -> None:
        """SHARE: the connections the idle ``lanes`` of ``leader`` go on in this pass."""
        if sum(lane.next_size() for _, lane in lanes) >= SHARED_PASS_BYTES:
            for tp, lane in lanes:
                groups.setdefault((leader, lane.home), []).append((tp, lane))
            return
        slots = range(self.connections)
        going = [s for s in slots if (leader, s) in groups]
        slot = (max(going, key=lambda s: len(groups[leader, s])) if going
                else min(slots, key=lambda s: self._out.get((leader, s), 0)))
        groups.setdefault((leader, slot), []).extend(lanes)

    def _ready(self, tp: TopicPartition, lane: Lane, pid: int) -> int | None:
        """The leader to send the lane's next batch to, if it may send one now."""
        if lane.stopped is not None or not lane.has_work() or lane.stale:  # STOPPED, IN-ORDER
            return None
        if lane.retry_at:
            if time.monotonic() < lane.retry_at:
                return None  # RE-SEND: backing off (a wake-up is due then)
            lane.retry_at = 0.0
        leader = self.requests.cluster.leader_of(tp)
        if leader is None:
            if (gave_up := self._leaders.wait(tp, lane)) is not None:
                self._stop(tp, lane, gave_up)
            return None
        if self.throttles.blocking and self.throttles.blocked(leader):
            return None  # THROTTLED (a wake-up is due when it ends)
        if lane.sent and lane.node != leader:
            return None  # IN-ORDER: what went to the old leader is answered first
        if lane.sent < len(lane.unacked):  # RE-SEND: as sent, or under the new id
            if lane.restamp and lane.pid == pid:
                return None  # the new producer id is being taken
            under = pid if lane.restamp else lane.pid
        elif lane.unacked and lane.pid != pid:
            return None  # ONE-PRODUCER-ID: what went out under the old id is acknowledged first
        else:
            if not lane.unacked:  # nothing out: the next batch continues the acknowledged prefix
                lane.pid, lane.next_seq = pid, self.state.sequence(tp)
            under = pid
        limit = self.window if under == pid and self.state.confirmed(tp) else 1  # WINDOW, PROBE
        return leader if lane.sent < limit else None

    def _send(
        self, conn: BrokerConnection, to: tuple[int, int], lanes: list[tuple[TopicPartition, Lane]],
        pid: int, epoch: int, recheck: bool,
    ) -> None:
        """One request (or more, by size) on connection ``to`` (leader, slot) with the next batch of
        each of ``lanes`` (found ready before answers came in, with ``recheck``)."""
        node, slot = to
        sent: dict[TopicPartition, Entry] = {}
        data: dict[TopicPartition, bytes] = {}
        for tp, lane in lanes:
            if (recheck and self._ready(tp, lane, pid) != node) or (lane.sent and lane.conn is not conn):
                continue  # not ready any more, or its attempts' connection was lost (IN-ORDER)
            e = lane.take(pid, epoch, self.state.sequence(tp))
            lane.node, lane.conn, lane.slot = node, conn, slot
            sent[tp], data[tp] = e, e.data
        for chunk in self.requests.chunks(data) if data else ():
            entries = {tp: sent[tp] for tp in chunk}
            self._out[to] = self._out.get(to, 0) + 1
            # a request is written when its task first runs, and tasks run in creation order
            task = asyncio.create_task(self._request(conn, to, chunk, entries))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    async def _request(
        self, conn: BrokerConnection, to: tuple[int, int], chunk: Mapping[TopicPartition, bytes],
        entries: Mapping[TopicPartition, Entry],
    ) -> None:
        try:
            res: Mapping[TopicPartition, Answer] = await self.requests.request(conn, chunk)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the whole request failed: connection lost, time-out
            res = {tp: exc for tp in entries}
        finally:
            self._out[to] -= 1
        if isinstance(res, Answers) and res.throttle_ms > 0:  # THROTTLED
            asyncio.get_running_loop().call_later(self.throttles.note(to[0], res.throttle_ms), self._wake.set)
        for tp, e in entries.items():
            self._answer(e, res.get(tp, BrokerError(-1, f"no result for {tp}")))
        self._wake.set()

    # ---------------------------------------------------------------------------- outcomes
    def _answer(self, e: Entry, out: Answer) -> None:
        self._answers += 1
        lane = self._lanes.get(e.tp)
        if lane is None or not lane.answered(e):
            return  # closed, or an attempt from before a rewind: the lane has moved on (RE-SEND)
        self._busy[e.tp] = lane
        if isinstance(out, ProducePartitionResponse) and out.error_code == NONE:
            lane.acknowledged(e)
            if e.pid == lane.pid == self.state.producer_id:
                self.state.set_sequence(e.tp, lane.sequence_after_prefix())
            if not e.future.done():
                e.future.set_result(out.base_offset)
            return
        cause = _cause(e.tp, out)
        code = out.error_code if isinstance(out, ProducePartitionResponse) else None
        if code is None or invalidates_metadata(code):
            self.requests.cluster.invalidate({e.tp.topic})
        refused = e if code is not None else None  # the broker's refusal: not appended (this time)
        lost = code is not None and producer_state_lost(code)
        # DEEP: the broker may be past it (more batches unanswered than it remembers, or a later
        # batch acknowledged: the broker appended that one after this, so this one is on it)
        if lost and (lane.unsure > REMEMBERED or lane.blind or lane.gap):
            self._stop(e.tp, lane, ResendRefusedError(lane.refusal(e.tp, str(cause))))
        elif lost:  # the broker forgot our producer here: sent again under a new id
            self.state.forget(e.pid)
            lane.restamp = True
            self._retry(e.tp, lane, cause, refused)
        elif code in WAIT_CODES and lane.surely_refused(e):  # WAIT
            self._stop(e.tp, lane, cause, refused, surely=True)
        elif is_retriable_error(cause):
            self._retry(e.tp, lane, cause, refused)
        else:
            self._stop(e.tp, lane, cause, refused)

    def _retry(
        self, tp: TopicPartition, lane: Lane, cause: BaseException, refused: Entry | None = None
    ) -> None:
        """RE-SEND after a backoff, unless the retry time-out passed since the last
        acknowledgment (then STOPPED)."""
        now = time.monotonic()
        config = self.requests.cluster.config
        if lane.trouble_since is None:
            lane.trouble_since = now
            lane.backoff = Backoff(config.retry_backoff_s, config.retry_backoff_max_s)
        elif now - lane.trouble_since >= self.requests.config.retry_timeout_s:
            self._stop(tp, lane, cause, refused)
            return
        log.debug("%s: sending %d unacknowledged batches again after %r", tp, len(lane.unacked), cause)
        lane.rewind()
        delay = lane.backoff.next_delay()
        lane.retry_at = now + delay
        asyncio.get_running_loop().call_later(delay, self._wake.set)

    def _stop(self, tp: TopicPartition, lane: Lane, cause: BaseException, refused: Entry | None = None,
              surely: bool = False) -> None:
        """STOPPED: the lane gives up; its batches not acknowledged fail, the first with ``cause``."""
        failed = lane.stop(tp, cause, refused, surely=surely)
        log.debug("%s stopped (in doubt: %s): %r", tp, lane.stopped and lane.stopped.in_doubt, cause)
        for i, e in enumerate(failed):
            e.fail(cause if i == 0 else stopped_error(tp, cause))


def _cause(tp: TopicPartition, out: Answer) -> BaseException:
    if isinstance(out, BaseException):
        return out
    return BrokerError(out.error_code, f"produce to {tp}: {out.error_message or ''}")
