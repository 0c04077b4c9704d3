"""A flow's committed source positions: read them, and move or forget them (in the spirit of KIP-875).

The positions live in ``mm2-offsets.<source>.internal`` on the target (:class:`PositionStore`), one
per source partition: the next source offset to mirror and the target offset it maps to. A reset
writes new positions there; the flow's tasks read them when they start, so a reset is only safe
while no task of the flow runs (the worker checks that the flow is stopped; the CLI cannot and
says so).

A moved position is written with the target partition's current end as its target offset: the
flow is stopped, so nothing after that end was written for the new position, and the tail
reconciler (``connectors/resume.py``) has nothing to skip when the flow resumes — while a worker
killed after resuming, before its first commit, still resumes exactly. A target partition that
does not exist yet gets no target offset (the reconciler is skipped). A forgotten position (a
tombstone) makes the partition start as one never mirrored (``auto.offset.reset``, earliest by
default).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from mm2py.client.cluster import EARLIEST, LATEST, ClusterClient
from mm2py.config.models import FlowConfig
from mm2py.connectors.client_settings import raw_client_settings
from mm2py.errors import Mm2pyError
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin, StoreError
from mm2py.stores.positions import PositionStore

__all__ = ["OffsetResetError", "PartitionOffset", "Reset", "read_offsets", "reset_offsets"]

#: where a partition is moved to: a source offset (the next one to mirror), or its log's ends
Reset = int | Literal["earliest", "latest"]


class OffsetResetError(Mm2pyError):
    """A reset that cannot be done as asked (a partition the source lacks, an offset out of range)."""


@dataclass(frozen=True)
class PartitionOffset:
    """One source partition's committed position: ``position`` is the next source offset to mirror
    (``None``: forgotten, the partition starts as never mirrored); ``target_offset`` the target
    partition's end it maps to (``None``: unknown)."""

    topic: str
    partition: int
    position: int | None
    target_topic: str
    target_offset: int | None


def _store(flow: FlowConfig) -> PositionStore:
    admin = ClusterAdmin.for_cluster(flow, "target")
    partitions, rf = flow.progress_topic_layout()
    return PositionStore(admin, flow.source, replication_factor=rf, partitions=partitions,
                         connector=flow.connector_name)


def _rows(flow: FlowConfig, positions: Mapping[TopicPartition, Position | None]) -> list[PartitionOffset]:
    policy = flow.replication_policy()
    rows = []
    for tp, pos in sorted(positions.items()):
        remote = policy.format_remote_topic(flow.source, tp.topic)
        rows.append(PartitionOffset(tp.topic, tp.partition, None if pos is None else pos.source, remote,
                                    None if pos is None else pos.target))
    return rows


async def read_offsets(flow: FlowConfig) -> list[PartitionOffset]:
    """Every partition the flow has a committed position for, by topic and partition."""
    store = _store(flow)
    try:
        positions = await asyncio.to_thread(store.load, flow.admin_timeout_ms / 1000)
    except (TimeoutError, RuntimeError) as exc:
        raise StoreError(f"reading {store.topic} on '{flow.target}' failed: {exc}") from None
    finally:
        store.close()
    return _rows(flow, positions)


async def reset_offsets(
    flow: FlowConfig, changes: Mapping[TopicPartition, Reset | None] | None, *, execute: bool = True
) -> list[PartitionOffset]:
    """Write the positions ``changes`` asks for and return them: a partition mapped to ``None`` is
    forgotten, and ``changes=None`` forgets every stored position. ``execute=False`` only resolves
    and checks them (a dry run)."""
    store = _store(flow)
    try:
        if changes is None:
            forget = list(await asyncio.to_thread(store.load, flow.admin_timeout_ms / 1000))
            moves: dict[TopicPartition, Reset] = {}
        else:
            forget = [tp for tp, to in changes.items() if to is None]
            moves = {tp: to for tp, to in changes.items() if to is not None}
        moved = await resolve(flow, moves) if moves else {}
        if execute:
            if forget:
                await asyncio.to_thread(store.forget, forget)
            if moved:
                await asyncio.to_thread(store.ensure_topic)
                await asyncio.to_thread(store.commit, moved)
        return _rows(flow, {**dict.fromkeys(forget), **moved})
    except (TimeoutError, RuntimeError) as exc:
        raise StoreError(f"writing {store.topic} on '{flow.target}' failed: {exc}") from None
    finally:
        store.close()


async def resolve(
    flow: FlowConfig, changes: Mapping[TopicPartition, Reset]
) -> dict[TopicPartition, Position]:
    """Each partition's new position, checked against the source log, with the target end."""
    settings = raw_client_settings(flow, fetch_max_bytes=flow.fetch_max_bytes)
    policy = flow.replication_policy()
    parts = sorted(changes)
    async with ClusterClient(flow.source_cluster.bootstrap_servers, settings.source_client) as source:
        await source.refresh_metadata(sorted({tp.topic for tp in parts}))
        unknown = [tp for tp in parts if tp.partition not in source.partitions_for(tp.topic)]
        if unknown:
            shown = ", ".join(str(tp) for tp in unknown[:5])
            raise OffsetResetError(f"cluster '{flow.source}' has no partition {shown}")
        low = await source.list_offsets(parts, EARLIEST)
        high = await source.list_offsets(parts, LATEST)
        # "latest" as the mirror reads: below any open transaction under read_committed
        last = await source.list_offsets(parts, LATEST, isolation_level=settings.fetcher.isolation_level)
    wanted: dict[TopicPartition, int] = {}
    for tp in parts:
        to = changes[tp]
        wanted[tp] = low[tp] if to == "earliest" else last[tp] if to == "latest" else int(to)
        if not low[tp] <= wanted[tp] <= high[tp]:
            raise OffsetResetError(
                f"offset {wanted[tp]} of {tp} is outside the source log ({low[tp]}..{high[tp]})")
    remote = {
        tp: TopicPartition(policy.format_remote_topic(flow.source, tp.topic), tp.partition) for tp in parts
    }
    ends = await _target_ends(flow, list(remote.values()))
    return {tp: Position(wanted[tp], ends.get(remote[tp])) for tp in parts}


async def _target_ends(flow: FlowConfig, parts: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    """The end offsets of the target partitions that exist."""
    settings = raw_client_settings(flow, fetch_max_bytes=flow.fetch_max_bytes)
    async with ClusterClient(flow.target_cluster.bootstrap_servers, settings.target_client) as target:
        await target.refresh_metadata(sorted({tp.topic for tp in parts}))
        there = [tp for tp in parts if tp.partition in target.partitions_for(tp.topic)]
        return await target.list_offsets(there, LATEST) if there else {}
