"""The audit's anchors, read from the clusters: every offset sync in the flow's offset-syncs topic
(MM2's format, whoever wrote it: mm2py or MirrorMaker 2) and every stored position of the flow in
its progress topic that carries a target offset (``mm2py.target.offset``), each added to its
partition's :class:`~mm2py.engine.audit.AnchorBook`. Both topics are compacted, so what survives of
their history is what the audit can anchor on. Read with the raw client, whole, from each
partition's log start to its end."""

from __future__ import annotations

import logging
import struct
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from mm2py.client.cluster import EARLIEST, LATEST, ClusterClient
from mm2py.client.fetcher import FetcherConfig, RawFetcher
from mm2py.engine.audit import AnchorBook
from mm2py.engine.audit.records import keys_and_values
from mm2py.operations.audit.scope import STUCK_FETCHES, AuditError, Clients
from mm2py.protocol.api_fetch import READ_COMMITTED
from mm2py.protocol.connect_offsets import decode, progress_topic
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.mm2_records import OffsetSync
from mm2py.protocol.types import TopicPartition

__all__ = ["AnchorCounts", "read_anchors"]

log = logging.getLogger(__name__)

_SYNC_VALUE = struct.Struct(">qq")  # upstream offset, downstream offset
#: a small internal topic is read in fetches of this size
_FETCH = FetcherConfig(isolation_level=READ_COMMITTED, max_wait_ms=0, max_bytes=32 << 20,
                       partition_max_bytes=8 << 20)

KeyValue = tuple[bytes | None, bytes | None]


@dataclass
class AnchorCounts:
    """What the anchor reads found (for the report)."""

    syncs: int = 0
    positions: int = 0
    #: records of either topic that were not in their format (left out)
    malformed: int = 0


async def topic_records(client: ClusterClient, topic: str) -> AsyncIterator[list[KeyValue]]:
    """Every committed record of ``topic`` as (key, value), a fetch's worth at a time; nothing
    when the topic does not exist."""
    await client.refresh_metadata([topic])
    tps = [TopicPartition(topic, p) for p in client.partitions_for(topic)]
    if not tps:
        return
    low = await client.list_offsets(tps, EARLIEST)
    high = await client.list_offsets(tps, LATEST, isolation_level=READ_COMMITTED)
    fetcher = RawFetcher(client, _FETCH)
    positions = {tp: low[tp] for tp in tps if low[tp] < high[tp]}
    idle = dict.fromkeys(positions, 0)  # fetches in a row that moved a partition nowhere
    while positions:
        fetched = await fetcher.fetch(positions, sessions=False)
        for tp, f in fetched.items():
            if not f.ok:
                raise AuditError(f"reading {topic} failed: {tp} at offset {f.fetch_offset}: {f.error_name}")
            out: list[KeyValue] = []
            for batch in f.batches:
                out += keys_and_values(batch)
            yield out
            moved = f.next_offset > positions[tp]
            positions[tp] = max(positions[tp], f.next_offset)
            idle[tp] = 0 if moved or f.starved or f.stalled else idle[tp] + 1
            if positions[tp] >= high[tp]:
                del positions[tp]
            elif idle[tp] >= STUCK_FETCHES:
                raise AuditError(f"reading {topic} failed: {STUCK_FETCHES} fetches of {tp} at offset "
                                 f"{positions[tp]} brought nothing (its end is {high[tp]})")


async def read_anchors(clients: Clients, books: Mapping[TopicPartition, AnchorBook]) -> AnchorCounts:
    """Add to ``books`` (by source partition) the flow's offset syncs and stored positions."""
    flow = clients.flow
    counts = AnchorCounts()
    names: dict[bytes, TopicPartition] = {}  # the partition of each sync key seen
    async for records in topic_records(clients.of(flow.offset_syncs_cluster), flow.offset_syncs_topic()):
        for key, value in records:
            tp = names.get(key) if key is not None else None
            if tp is None:
                tp = _sync_partition(key, value, counts)
                if tp is None:
                    continue
                names[key] = tp  # type: ignore[index]  # a sync's key is never None
            book = books.get(tp)
            if book is not None and value is not None and len(value) == _SYNC_VALUE.size:
                upstream, downstream = _SYNC_VALUE.unpack(value)
                book.add_sync(upstream, downstream)
                counts.syncs += 1
    async for records in topic_records(clients.target, progress_topic(flow.source)):
        for key, value in records:
            try:
                decoded = decode(key, value, flow.connector_name)
            except ProtocolError:
                counts.malformed += 1
                continue
            if decoded is None or decoded[0] != flow.source:
                continue
            _, tp, pos = decoded
            book = books.get(tp)
            if book is not None and pos is not None and pos.target is not None:
                book.add_position(pos.source, pos.target)
                counts.positions += 1
    return counts


def _sync_partition(key: bytes | None, value: bytes | None, counts: AnchorCounts) -> TopicPartition | None:
    """The source partition of an offset sync's key (read once per key, with a whole record)."""
    try:
        return OffsetSync.from_record(key, value).topic_partition
    except ProtocolError:
        counts.malformed += 1
        log.warning("a record of the offset-syncs topic is no offset sync; left out")
        return None
