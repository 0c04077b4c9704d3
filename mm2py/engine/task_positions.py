"""Where a task stands in each of its partitions: one :class:`TaskPositions` per task, its only owner.

A partition's row holds four values, each with one meaning:

- ``fetch``: the source offset the next fetch starts at (past every batch handed to the sink);
- ``acked``: the source offset of the first record not yet acknowledged by the target (what a
  commit stores, and where fetching starts again after a failed put);
- ``target_next``: the target offset the next acknowledged batch must land at (None: unknown), which
  is what a commit stores beside ``acked`` and what the ``target.*`` alarms compare with;
- ``topic_id``: the source topic id ``acked`` is in (None: not known yet).

A partition may be *held*: not fetched, its position kept where it stands (a record there the
target refuses, ``target.too.large`` under ``fail``), while the task's other partitions go on.

Invariants kept here (every change goes through a method of this class):

- **ACKED_BEHIND_FETCH**: ``acked <= fetch`` for every partition.
- **FILTERED_ONCE_PASSED**: a stretch of the source the sink gets nothing for (aborted transactions,
  control batches, records compacted away) counts as acknowledged only once every batch before it
  is; :meth:`pass_filtered` is that rule, used when a fetch held only such batches and when a put
  whose round ended in such a stretch is acknowledged.

The rows are kept by column (a dict per value) rather than as an object per partition: a fetch
round copies every fetch position and a periodic commit compares every acknowledged one, which for
thousands of partitions a dict copies and compares at C speed. Readers get read-only views.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

from mm2py.protocol.types import TopicPartition

__all__ = ["TaskPositions"]


class TaskPositions:
    """The positions of one task's partitions (see the module docstring for what each value means)."""

    def __init__(self) -> None:
        self._fetch: dict[TopicPartition, int] = {}
        self._acked: dict[TopicPartition, int] = {}
        self._target_next: dict[TopicPartition, int | None] = {}
        self._topic_ids: dict[TopicPartition, str] = {}
        self._held: set[TopicPartition] = set()
        #: read-only views for the committer and the runtime's status (no copy per read)
        self.acked: Mapping[TopicPartition, int] = MappingProxyType(self._acked)
        self.target_next: Mapping[TopicPartition, int | None] = MappingProxyType(self._target_next)
        self.topic_ids: Mapping[TopicPartition, str] = MappingProxyType(self._topic_ids)

    # -- reading -------------------------------------------------------------------------------
    def __contains__(self, tp: object) -> bool:
        return tp in self._acked

    def __len__(self) -> int:
        return len(self._acked)

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self._acked)

    def fetch_of(self, tp: TopicPartition) -> int:
        return self._fetch[tp]

    def wanted(self, until: Mapping[TopicPartition, int] | None) -> dict[TopicPartition, int]:
        """What the next fetch asks for: every fetch position, or those below ``until`` (a round)."""
        pos = self._fetch  # a copy at C speed when nothing bounds it (thousands of partitions)
        if self._held:
            held = self._held
            return {tp: o for tp, o in pos.items()
                    if tp not in held and (until is None or o < until.get(tp, 0))}
        return dict(pos) if until is None else {tp: o for tp, o in pos.items() if o < until.get(tp, 0)}

    @property
    def held(self) -> frozenset[TopicPartition]:
        """The partitions held where they stand (not fetched)."""
        return frozenset(self._held)

    # -- changing ------------------------------------------------------------------------------
    def start(self, tp: TopicPartition, acked: int, target_next: int | None, topic_id: str | None) -> None:
        """A partition taken into the task, fetched from where it was acknowledged."""
        self._acked[tp] = self._fetch[tp] = acked
        self._target_next[tp] = target_next
        self._held.discard(tp)
        if topic_id is not None:
            self._topic_ids[tp] = topic_id

    def drop(self, tp: TopicPartition) -> None:
        """A partition given up (its position committed for the next owner first)."""
        del self._acked[tp]
        self._fetch.pop(tp, None)
        self._target_next.pop(tp, None)
        self._topic_ids.pop(tp, None)
        self._held.discard(tp)

    def hold(self, tp: TopicPartition) -> None:
        """Stop fetching ``tp``; its position stays where it stands."""
        self._held.add(tp)

    def skip_record(self, tp: TopicPartition, offset: int) -> bool:
        """Leave out the record at ``offset``, where the partition is acknowledged up to: the
        position moves past it (fetching too, if it stood there). False if it stands elsewhere."""
        if self._acked.get(tp) != offset:
            return False
        self._acked[tp] = offset + 1
        if self._fetch[tp] <= offset:
            self._fetch[tp] = offset + 1
        return True

    def fetched(self, tp: TopicPartition, next_offset: int) -> int:
        """Batches up to ``next_offset`` handed to the sink; the new fetch position."""
        pos = self._fetch[tp]
        if next_offset > pos:
            self._fetch[tp] = pos = next_offset
        return pos

    def pass_filtered(self, tp: TopicPartition, after: int, end: int) -> None:
        """FILTERED_ONCE_PASSED: the source from ``after`` to ``end`` gave the sink nothing; once the
        partition is acknowledged up to ``after``, it is acknowledged up to ``end``."""
        acked = self._acked[tp]
        if acked >= after and end > acked:
            self._acked[tp] = end

    def skip_filtered(self, tp: TopicPartition, next_offset: int) -> None:
        """A fetch that held only batches the sink gets nothing for, up to ``next_offset``."""
        pos = self._fetch[tp]
        if next_offset > pos:
            self.pass_filtered(tp, pos, next_offset)
            self._fetch[tp] = next_offset

    def reset(self, tp: TopicPartition, offset: int, topic_id: str | None) -> bool:
        """The source moved the partition to ``offset`` (retention, a topic created again): fetch
        and acknowledged position both go there. True if the acknowledged position moved."""
        if topic_id is not None:
            self._topic_ids[tp] = topic_id
        self._fetch[tp] = offset
        if self._acked[tp] == offset:
            return False
        self._acked[tp] = offset
        return True

    def learn_topic_id(self, tp: TopicPartition, topic_id: str) -> None:
        """The source topic id of a partition whose position did not know it (set once)."""
        self._topic_ids.setdefault(tp, topic_id)

    def acknowledge(
        self, tp: TopicPartition, source_next: int, target_first: int, records: int
    ) -> int | None:
        """A batch acknowledged by the target at ``target_first``; returns the target offset it was
        expected at (where the one before ended; None: unknown)."""
        self._acked[tp] = source_next
        expected = self._target_next[tp]
        self._target_next[tp] = target_first + records
        return expected

    def retarget(self, tp: TopicPartition, target_next: int) -> None:
        """The remote partition ends at ``target_next`` (an alarm under ``skip`` named how it
        differs): the next batch must land there."""
        self._target_next[tp] = target_next

    def rewind(self) -> None:
        """After a failed put, every later one settled: fetch again from what was acknowledged."""
        self._fetch.update(self._acked)
