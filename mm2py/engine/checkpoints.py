"""Checkpoints: consumer-group offsets of the source translated to the target (pure logic).

A checkpoint says "group G, having committed upstream offset U on source partition t-p, may resume
at downstream offset D of the target partition <renamed t>-p". mm2py computes D so that a consumer
starting there neither skips nor re-reads a record that the source group had (not) consumed yet:

* **Only mirrored, committed positions translate exactly.** The offset syncs are exact for every
  position the mirror delivered *and* whose syncs were flushed. A task flushes its syncs before it
  commits its progress (``mm2-offsets.<source>.internal``), so every source offset below the
  committed position ``P`` (with its target offset ``T``) is covered. A group offset ``u`` is
  translated as ``min(u, P)`` with the target end capped at ``T``: exact when the mirror has passed
  ``u``; otherwise the target offset of ``P`` (the consumer re-reads what was not mirrored yet when
  the checkpoint was taken, and skips nothing). Without progress for a partition, or with one
  written by MirrorMaker 2 (no target offset), no checkpoint is made.
* **Which checkpoints are emitted** (MM2's rule): the first one of a group's partition; then one
  whose downstream offset advanced, or whose upstream offset went backwards (the source group was
  reset); nothing otherwise, so an unchanged checkpoint is not written again and a downstream offset
  never goes back while the upstream one did not.
* **Group offset sync** (MM2's rule): offsets are committed to a target group only while it is
  inactive there (no members: ``EMPTY`` or unknown to the target), and a partition's committed
  offset on the target is never moved backwards (only when the checkpoint is strictly ahead of it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.mm2_records import Checkpoint
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import GroupOffset


def translate_offset(
    syncs: OffsetSyncStore, tp: TopicPartition, upstream: int, progress: Position | None
) -> int | None:
    """Target offset for source position ``upstream`` of ``tp``; None when it cannot be exact-or-behind."""
    if progress is None or progress.target is None:
        return None
    return syncs.translate(tp, min(upstream, progress.source), progress.target)


def translate_group(
    group: str,
    offsets: Mapping[TopicPartition, GroupOffset],
    *,
    mirrored: Callable[[str], bool],
    rename: Callable[[str], str],
    syncs: OffsetSyncStore,
    progress: Mapping[TopicPartition, Position],
) -> dict[TopicPartition, Checkpoint]:
    """Checkpoints (keyed by *target* partition) for a group's committed source offsets.

    Partitions of topics the flow does not mirror (``mirrored``: topic filter, internal topics,
    cycles) and partitions that cannot be translated yet are left out.
    """
    out: dict[TopicPartition, Checkpoint] = {}
    for tp, committed in offsets.items():
        if committed.offset < 0 or not mirrored(tp.topic):
            continue
        downstream = translate_offset(syncs, tp, committed.offset, progress.get(tp))
        if downstream is None or downstream < 0:
            continue
        target_tp = TopicPartition(rename(tp.topic), tp.partition)
        out[target_tp] = Checkpoint(group, target_tp, committed.offset, downstream, committed.metadata)
    return out


def is_newer(new: Checkpoint, last: Checkpoint | None) -> bool:
    """MM2's emission rule: first, upstream rewind, or downstream advance."""
    if last is None:
        return True
    if new.upstream_offset < last.upstream_offset:
        return True  # the source group was reset backwards: follow it
    return new.downstream_offset > last.downstream_offset


@dataclass
class CheckpointLog:
    """The latest checkpoint of every (group, target partition): read back, then as emitted."""

    _latest: dict[str, dict[TopicPartition, Checkpoint]] = field(default_factory=dict)

    def add(self, cp: Checkpoint) -> None:
        self._latest.setdefault(cp.group, {})[cp.topic_partition] = cp

    def get(self, group: str) -> dict[TopicPartition, Checkpoint]:
        return dict(self._latest.get(group, {}))

    def groups(self) -> list[str]:
        return sorted(self._latest)

    def changed(self, checkpoints: Iterable[Checkpoint]) -> list[Checkpoint]:
        """The checkpoints worth emitting (``is_newer`` than the latest of their partition)."""
        return [
            cp for cp in checkpoints
            if is_newer(cp, self._latest.get(cp.group, {}).get(cp.topic_partition))
        ]


def offsets_to_sync(
    checkpoints: Mapping[TopicPartition, Checkpoint], target: Mapping[TopicPartition, GroupOffset]
) -> dict[TopicPartition, GroupOffset]:
    """What to commit to the target group: checkpoints strictly ahead of its committed offsets."""
    out = {}
    for tp, cp in checkpoints.items():
        current = target.get(tp)
        if current is not None and current.offset >= cp.downstream_offset:
            continue  # never move a target group backwards (nor commit the same offset again)
        out[tp] = GroupOffset(cp.downstream_offset, cp.metadata)
    return out
