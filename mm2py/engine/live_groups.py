"""Live group offset sync, the pure part: which source commits wait for a checkpoint, and what the
mirror knows to translate them exactly.

The live sync (``connectors/live_sync.py``) learns of every commit of a source group as it
happens (from ``__consumer_offsets``, or by polling the groups' offsets) and hands it to
:class:`LiveGroups`. A commit waits there as a :class:`Change` until it can be translated **exactly**:
until the mirror has copied everything below the committed offset ``u`` (a position ``P >= u``) and
the offset syncs below ``P`` are known. Then it becomes a checkpoint, by the same rule as every
checkpoint (``engine/checkpoints.translate_offset``: the syncs, ``min(u, P)``, the target end ``T``
of ``P``). Under live traffic a group commits offsets the mirror reaches a few milliseconds later,
so a change waits that long; one that cannot become exact within ``patience`` seconds (the mirror
is stopped, far behind) is left to the periodic checkpoint round, which translates "exact or
behind" as it always did.

Where ``P``, ``T`` and the syncs come from (a :class:`MirrorView`):

* :class:`TopicsView`: the flow's progress topic and offset-syncs topic as the checkpoint connector
  reads them (every runtime). A task commits its progress every ``--commit-interval`` (1 s), so a
  change waits up to that long for it.
* :class:`AcknowledgedView`: what the flow's tasks *in this process* had acknowledged by the target
  (the in-process runtime): each task's acknowledged batches (where the partition stands, source
  and target), and the offset syncs its planner made for them, handed over as the task settles
  them and sends the syncs (before the syncs are flushed). The
  same facts the progress topic receives a moment later, so the same translation is exact on them
  — a few milliseconds after the target acknowledged the batches instead of at the next progress
  commit. A task settles a put and sends its syncs in one step of the event loop; the view is
  read on the event loop too, so it never sees a position without its syncs.

A view is tried first; a change it cannot translate exactly (its syncs no longer held, say) is
tried on the next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from mm2py.engine.checkpoints import translate_offset
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.engine.task_contract import Delivered
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.consumer_offsets import ConsumerOffsetsRecord, GroupRecord, OffsetCommit
from mm2py.protocol.mm2_records import Checkpoint, OffsetSync
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin_types import GroupOffset

__all__ = ["AcknowledgedView", "Change", "LiveGroups", "MirrorView", "TopicsView", "as_fetched",
           "exact_translation"]


def exact_translation(
    syncs: OffsetSyncStore, tp: TopicPartition, upstream: int, progress: Position | None
) -> int | None:
    """The target offset of source position ``upstream`` when the mirror has passed it (exact),
    else None (the periodic round may still checkpoint it "behind")."""
    if progress is None or upstream > progress.source:
        return None
    return translate_offset(syncs, tp, upstream, progress)


def as_fetched(metadata: str) -> str:
    """A commit's metadata as the periodic round reads it (OffsetFetch through librdkafka, which
    reads it up to its first NUL): librdkafka's clients commit C strings with their NUL, and the
    coordinator keeps that byte. A live checkpoint then carries what a periodic one would."""
    return metadata.split("\x00", 1)[0]


class MirrorView(Protocol):
    def exact(self, tp: TopicPartition, upstream: int) -> int | None:
        """The exact target offset of ``upstream``, or None when this view cannot tell it."""


@dataclass
class TopicsView:
    """The progress and offset-syncs topics as the checkpoint connector has read them."""

    syncs: OffsetSyncStore
    progress: Mapping[TopicPartition, Position]

    def exact(self, tp: TopicPartition, upstream: int) -> int | None:
        return exact_translation(self.syncs, tp, upstream, self.progress.get(tp))


class AcknowledgedView:
    """What this process's tasks of one flow had acknowledged by the target (in-process runtime).

    The flow runner hands over each task's acknowledged batches as the task settles them
    (:meth:`delivered`: a partition's position is then the next source offset after its last
    acknowledged batch and its target end after it, as the task's own), and the task's progress
    keeper the offset syncs its planner made for them (:meth:`add_syncs`), in the same step of the
    event loop; :meth:`snapshot` is read on the event loop too. A stretch of aborted or control
    batches after a partition's last acknowledged batch moves the task's position but not this
    one: a commit inside it waits for the next batch, or for the task's progress commit.
    """

    def __init__(self, max_per_partition: int = 4096) -> None:
        #: recent syncs only: an older commit is translated with the offset-syncs topic instead
        self.syncs = OffsetSyncStore(max_per_partition=max_per_partition)
        self.positions: dict[TopicPartition, Position] = {}

    def delivered(self, batches: Iterable[Delivered]) -> None:
        for d in batches:
            self.positions[d.source] = Position(d.source_next, d.target_first + d.records)

    def add_syncs(self, syncs: Sequence[OffsetSync]) -> None:
        for sync in syncs:
            self.syncs.add(sync)

    def snapshot(self) -> TopicsView:
        """The view as it stands (not a copy: read it before the event loop moves on)."""
        return TopicsView(self.syncs, self.positions)


@dataclass(frozen=True)
class Change:
    """A source group's commit waiting for its exact checkpoint."""

    group: str
    partition: TopicPartition
    offset: GroupOffset
    commit_ms: int  # when the source committed it (its coordinator's clock), ms since the epoch
    seen: float  # when it was learnt of (monotonic s)


@dataclass
class LiveGroups:
    """Source commits of selected groups on mirrored topics, each waiting for its exact checkpoint."""

    selects: Callable[[str], bool]  # the flow's group filter
    mirrored: Callable[[str], bool]  # does the flow mirror this source topic
    rename: Callable[[str], str]  # its target name
    patience: float = 60.0
    pending: dict[tuple[str, TopicPartition], Change] = field(default_factory=dict)
    groups: set[str] = field(default_factory=set)  #: selected groups seen committing
    given_up: int = 0  #: changes left to the periodic round after ``patience``
    _selected: dict[str, bool] = field(default_factory=dict)
    _polled: dict[str, dict[TopicPartition, GroupOffset]] = field(default_factory=dict)

    def selected(self, group: str) -> bool:
        known = self._selected.get(group)
        if known is None:
            known = self._selected[group] = self.selects(group)
        return known

    def offer(self, record: ConsumerOffsetsRecord, now: float) -> str | None:
        """Take one ``__consumer_offsets`` record; returns the group if it is one not seen before."""
        if isinstance(record, GroupRecord):
            if record.deleted:
                self.forget(record.group)
            return None
        if not isinstance(record, OffsetCommit) or not self.selected(record.group):
            return None
        key = (record.group, record.partition)
        if record.value is None:  # the offset was deleted (expired, group deleted)
            self.pending.pop(key, None)
            return None
        new = record.group not in self.groups
        self.groups.add(record.group)
        if self.mirrored(record.partition.topic) and record.value.offset >= 0:
            committed = GroupOffset(record.value.offset, as_fetched(record.value.metadata))
            self.pending[key] = Change(record.group, record.partition, committed,
                                       record.value.commit_timestamp, now)
        return record.group if new else None

    def offer_offsets(self, group: str, offsets: Mapping[TopicPartition, GroupOffset], now: float,
                      wall_ms: int) -> bool:
        """Take a group's committed offsets as polled (the fallback without ``__consumer_offsets``):
        each partition that changed since the last poll is a change. True if the group is new."""
        if not self.selected(group):
            return False
        last = self._polled.get(group, {})
        self._polled[group] = dict(offsets)
        for tp, committed in offsets.items():
            if last.get(tp) != committed and self.mirrored(tp.topic) and committed.offset >= 0:
                self.pending[(group, tp)] = Change(group, tp, committed, wall_ms, now)
        new = group not in self.groups
        self.groups.add(group)
        return new

    def forget(self, group: str) -> None:
        """The group is gone on the source: nothing of it waits any more."""
        self.groups.discard(group)
        self._polled.pop(group, None)
        for key in [k for k in self.pending if k[0] == group]:
            del self.pending[key]

    def ready(self, views: Iterable[MirrorView], now: float) -> list[tuple[Checkpoint, Change]]:
        """The changes that ``views`` translate exactly, as checkpoints (no longer pending); changes
        waiting longer than ``patience`` are dropped."""
        views = list(views)
        out: list[tuple[Checkpoint, Change]] = []
        for key, change in list(self.pending.items()):
            tp, upstream = change.partition, change.offset.offset
            downstream = next((d for v in views if (d := v.exact(tp, upstream)) is not None), None)
            if downstream is not None and downstream >= 0:
                target = TopicPartition(self.rename(tp.topic), tp.partition)
                out.append((Checkpoint(change.group, target, upstream, downstream, change.offset.metadata),
                            change))
                del self.pending[key]
            elif now - change.seen > self.patience:
                del self.pending[key]
                self.given_up += 1
        return out

    def restore(self, changes: Iterable[Change]) -> None:
        """Changes taken by :meth:`ready` whose checkpoint could not be written: they wait again
        (unless a later commit of the partition came meanwhile)."""
        for change in changes:
            self.pending.setdefault((change.group, change.partition), change)

    def waiting_since(self) -> float | None:
        """When the oldest change still waiting was seen (None: nothing waits)."""
        return min((c.seen for c in self.pending.values()), default=None)

    def newest_wait(self) -> float | None:
        """When the newest change still waiting was seen (None: nothing waits)."""
        return max((c.seen for c in self.pending.values()), default=None)
