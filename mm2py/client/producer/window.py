"""Pipelined idempotent produce: up to ``window`` rounds of requests in flight per connection.

Round k carries the k-th batch of every partition. Rounds are written to each broker connection in
order and the broker handles a connection's requests in order, so a partition's batches are
appended in order; its sequence numbers are assigned when a round is built. If a batch fails, the
broker refuses the partition's later batches of the window (out-of-order sequence), unless the
failure was only seen by us (a time-out or a lost connection after the append) — then the later
batches were appended too, and sending them again with the same sequences is answered by the
broker's duplicate detection (it remembers a producer's last five batches per partition, hence
``window <= 5``). So the result is always a prefix per partition: acknowledged offsets up to the
first failure, -1 after it, and the sequences are left right after the prefix.

Routing goes through :meth:`ClusterClient.for_leaders`: it groups the partitions by leader and
retries those it could not send at all (no leader known, leader unreachable) after a metadata
refresh. Once a partition's batches were written their outcome is final here (``_written``): what
follows a failure is sent again by the caller, from the acknowledged prefix.

The window works through two small collaborators: the :class:`ProducerState` (id, epoch,
sequences) and the :class:`ProduceRequests` (building, sending and reading Produce requests).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence

from mm2py.client.connection import BrokerConnection
from mm2py.client.errors import ClientError, ProduceError
from mm2py.client.producer.requests import ProduceRequests
from mm2py.client.producer.state import ProducerState, producer_state_lost
from mm2py.protocol.api import ProducePartitionResponse
from mm2py.protocol.batch_edit import for_produce, increment_sequence
from mm2py.protocol.errors_codes import NONE, BrokerError, invalidates_metadata
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

__all__ = ["produce_windowed"]

Outcome = ProducePartitionResponse | BaseException
#: one partition's batches, in order: (index in the call's items, sequence number, batch)
Lane = list[tuple[int, int, RecordBatch]]
#: per partition, the outcome of each of its batches that was sent, in order
Outcomes = dict[TopicPartition, list[Outcome]]
#: the requests of one round on one connection: (their partitions, the task awaiting the response)
Sent = list[tuple[list[TopicPartition], asyncio.Task[dict[TopicPartition, ProducePartitionResponse]]]]


async def produce_windowed(
    state: ProducerState,
    requests: ProduceRequests,
    items: Sequence[tuple[TopicPartition, RecordBatch]],
    window: int,
) -> list[int]:
    """Produce ``items`` (normalized batches) with up to ``window`` rounds in flight per connection.

    Returns the target base offset of each item; raises ProduceError with the acknowledged prefix
    per partition when not everything was delivered."""
    pid, epoch = await state.ensure()
    lanes: dict[TopicPartition, Lane] = {}
    next_seq: dict[TopicPartition, int] = {}
    for i, (tp, b) in enumerate(items):
        seq = next_seq[tp] if tp in next_seq else state.sequence(tp)
        next_seq[tp] = increment_sequence(seq, b.records_count)
        lanes.setdefault(tp, []).append((i, seq, b))
    outcomes: Outcomes = {}

    async def send(conn: BrokerConnection, part: dict[TopicPartition, Lane]) -> Outcomes:
        got = await _pipeline(requests, conn, part, (pid, epoch), window)
        outcomes.update(got)  # kept even if routing fails for another broker's partitions
        return got

    unsent: BaseException | None = None
    try:
        await requests.cluster.for_leaders(lanes, send, _written, timeout=requests.config.retry_timeout_s)
    except Exception as exc:  # some partitions could not be sent at all (no leader, unreachable)
        unsent = exc
    offsets = [-1] * len(items)
    first_failure: dict[TopicPartition, Outcome] = {}
    for tp, lane in lanes.items():
        got = outcomes.get(tp, [])
        for k, (i, seq, b) in enumerate(lane):
            out = got[k] if k < len(got) else unsent or ClientError(f"{tp}: no outcome")
            if not (isinstance(out, ProducePartitionResponse) and out.error_code == NONE):
                first_failure[tp] = out
                break
            offsets[i] = out.base_offset
            state.set_sequence(tp, increment_sequence(seq, b.records_count))
    if first_failure:
        cause = await _after_failures(state, requests, first_failure, pid)
        raise ProduceError(f"{len(first_failure)} partitions not fully delivered: {cause}", offsets, cause)
    return offsets


def _written(_: list[Outcome]) -> int:
    """What ``for_leaders`` sees of a partition's outcome: once written, nothing it should resend."""
    return NONE


async def _pipeline(
    requests: ProduceRequests,
    conn: BrokerConnection,
    part: Mapping[TopicPartition, Lane],
    ident: tuple[int, int],
    window: int,
) -> Outcomes:
    """Round k carries the k-th batch of each partition; up to ``window`` rounds in flight on ``conn``.
    Never raises: a request that failed as a whole is the outcome of each of its partitions."""
    pid, epoch = ident
    got: Outcomes = {tp: [] for tp in part}
    inflight: deque[Sent] = deque()
    for k in range(max(len(lane) for lane in part.values())):
        while len(inflight) >= window:
            await _collect(inflight.popleft(), got)
        batches = {
            tp: for_produce(lane[k][2], pid, epoch, lane[k][1], verify=False)
            for tp, lane in part.items() if k < len(lane)
        }
        # a request is written when its task first runs, and tasks run in creation order
        chunks = requests.chunks(batches)
        inflight.append([(list(c), asyncio.create_task(requests.request(conn, c))) for c in chunks])
        await asyncio.sleep(0)
    while inflight:
        await _collect(inflight.popleft(), got)
    return got


async def _collect(sent: Sent, got: Outcomes) -> None:
    """The outcomes of one round, appended to each partition's list (rounds are collected in order)."""
    for tps, task in sent:
        res: Mapping[TopicPartition, Outcome]
        try:
            res = await task
        except Exception as exc:  # the whole request failed: connection lost, time-out
            res = {tp: exc for tp in tps}
        for tp in tps:
            got[tp].append(res.get(tp, BrokerError(-1, f"no result for {tp}")))


async def _after_failures(
    state: ProducerState, requests: ProduceRequests, first_failure: Mapping[TopicPartition, Outcome], pid: int
) -> BaseException:
    """Forget our producer id if the broker did, mark stale metadata; returns the first cause."""
    stale: set[str] = set()
    reset = False
    cause: BaseException | None = None
    for tp, out in first_failure.items():
        if isinstance(out, ProducePartitionResponse):
            reset |= producer_state_lost(out.error_code)
            if invalidates_metadata(out.error_code):
                stale.add(tp.topic)
            cause = cause or BrokerError(out.error_code, f"produce to {tp}: {out.error_message or ''}")
        else:
            stale.add(tp.topic)
            cause = cause or out
    if reset:
        await state.reset(pid)
    if stale:
        requests.cluster.invalidate(stale)
    assert cause is not None
    return cause
