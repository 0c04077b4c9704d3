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

The window works through two small collaborators: the :class:`ProducerState` (id, epoch,
sequences) and the :class:`ProduceRequests` (building, sending and reading Produce requests).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence

from mm2py.client.connection import BrokerConnection
from mm2py.client.errors import ClientError, NoLeaderError, ProduceError
from mm2py.client.producer.requests import ProduceRequests
from mm2py.client.producer.state import ProducerState, producer_state_lost
from mm2py.protocol.api import ProducePartitionResponse
from mm2py.protocol.batch_edit import for_produce, increment_sequence
from mm2py.protocol.errors_codes import NONE, BrokerError, invalidates_metadata
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

__all__ = ["produce_windowed"]

Outcome = ProducePartitionResponse | BaseException


async def produce_windowed(
    state: ProducerState,
    requests: ProduceRequests,
    items: Sequence[tuple[TopicPartition, RecordBatch]],
    rounds: list[dict[TopicPartition, int]],
    window: int,
) -> list[int]:
    cluster = requests.cluster
    tps = {tp for tp, _ in items}
    topics = {tp.topic for tp in tps}
    await cluster.ensure_topics(topics)
    if any(cluster.leader_of(tp) is None for tp in tps):
        cluster.invalidate(topics)
        await cluster.refresh_metadata(topics)
    offsets = [-1] * len(items)
    missing = [tp for tp in tps if cluster.leader_of(tp) is None]
    if missing:
        raise ProduceError(f"no leader for {missing[:3]}", offsets, NoLeaderError(str(missing[:3])))
    leaders = {tp: cluster.leader_of(tp) for tp in tps}
    try:
        conns = {node: await cluster.connection(node) for node in set(leaders.values()) if node is not None}
    except ClientError as exc:
        # a leader that cannot be reached is most likely gone: the next attempt asks for metadata
        cluster.invalidate(topics)
        raise ProduceError(f"cannot reach a partition leader: {exc}", offsets, exc) from exc
    pid, epoch = await state.ensure()
    next_seq = {tp: state.sequence(tp) for tp in tps}
    seqs: list[dict[TopicPartition, int]] = []
    outcomes: list[dict[TopicPartition, Outcome]] = [{} for _ in rounds]
    Sent = list[tuple[list[TopicPartition], asyncio.Task[dict[TopicPartition, Outcome]]]]
    inflight: deque[tuple[int, Sent]] = deque()

    async def collect() -> None:
        k, sent = inflight.popleft()
        for part, task in sent:
            try:
                outcomes[k].update(await task)
            except Exception as exc:  # the whole request failed: connection lost, time-out
                outcomes[k].update({tp: exc for tp in part})

    for k, rnd in enumerate(rounds):
        while len(inflight) >= window:
            await collect()
        by_node: dict[int, dict[TopicPartition, bytes]] = {}
        s_k: dict[TopicPartition, int] = {}
        for tp, i in rnd.items():
            s_k[tp] = next_seq[tp]
            next_seq[tp] = increment_sequence(next_seq[tp], items[i][1].records_count)
            node = leaders[tp]
            assert node is not None
            by_node.setdefault(node, {})[tp] = for_produce(items[i][1], pid, epoch, s_k[tp], verify=False)
        seqs.append(s_k)
        sent = []
        for node, part in by_node.items():
            for chunk in requests.chunks(part):
                conn = conns[node]
                # the request is written when the task first runs: tasks run in creation order
                task = asyncio.create_task(_outcomes(requests, conn, chunk))
                sent.append((list(chunk), task))
        inflight.append((k, sent))
        await asyncio.sleep(0)
    while inflight:
        await collect()

    first_failure: dict[TopicPartition, Outcome] = {}
    for k, rnd in enumerate(rounds):
        for tp, i in rnd.items():
            if tp in first_failure:
                continue
            out = outcomes[k].get(tp, BrokerError(-1, f"no result for {tp}"))
            if isinstance(out, ProducePartitionResponse) and out.error_code == NONE:
                offsets[i] = out.base_offset
                state.set_sequence(tp, increment_sequence(seqs[k][tp], items[i][1].records_count))
            else:
                first_failure[tp] = out
    if not first_failure:
        return offsets
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
        cluster.invalidate(stale)
    raise ProduceError(f"{len(first_failure)} partitions not fully delivered: {cause}", offsets, cause)


async def _outcomes(
    requests: ProduceRequests, conn: BrokerConnection, part: Mapping[TopicPartition, bytes]
) -> dict[TopicPartition, Outcome]:
    return dict(await requests.request(conn, part))
