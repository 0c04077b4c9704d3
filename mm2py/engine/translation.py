"""Exact two-way offset translation for one mirrored partition (pure).

What it is for: moving a consumer between the clusters of a flow in **either** direction — a group
or an external offset store (a Spark checkpoint, a JSON map) failing over to the target, or failing
back to the source — so that it neither re-reads nor skips a record.

What it knows, per source partition (a :class:`PartitionMap`):

* the flow's **offset syncs** ``(U, D)``, sorted, as read back from the offset-syncs topic. mm2py
  writes one wherever ``D - U`` changes (``engine/offset_syncs.py``), so between two syncs the
  mapping is linear: every target record from ``D_i`` to ``D_{i+1} - 1`` came from source offset
  ``U_i + (d - D_i)``;
* the flow's **committed position** ``(P, T)``: everything below source offset ``P`` is on the target
  below target offset ``T``, and its syncs were flushed before ``P`` was committed.

The rules:

* **forward** (source position ``u`` → target position): the last sync ``U_i <= u`` gives
  ``D_i + (u - U_i)``, capped at the next sync's ``D_{i+1}`` and at ``T`` (a position in a gap —
  aborted records, transaction markers, compaction — goes to the first target record after it);
  ``u == P`` is ``T``;
* **back** (target position ``d`` → source position): inside a mirrored run, the source offset of
  the record at ``d`` (``U_i + (d - D_i)`` with the last ``D_i <= d``); at the end of what was
  mirrored (``d == T``) the next source offset ``P``.

Both are exact for every position they answer: for a source offset ``s`` holding a record,
``back(forward(s)) == s``; a consumer resuming at a translated position reads exactly the records
the original position had not read yet. A position they cannot answer exactly is refused with a
named error, never guessed: before the oldest sync still known (:class:`BeforeSyncsError`: the
offset-syncs topic is compacted, and syncs older than the era of the current target partition are
not used), past what was mirrored (:class:`BeyondMirroredError`: ``u > P`` or ``d > T``), a
partition the flow holds no position or no syncs for (:class:`NotMirroredError`). Answers lie in
``[oldest sync, P]`` on the source and ``[oldest sync, T]`` on the target, so a translated position
is never past what the flow had committed; the translator (``operations/translator.py``) also refuses
one past the other cluster's log end now (:class:`PastLogEndError`: the partition truncated or
created again since), so a consumer moved with it never has a negative lag.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from mm2py.errors import Mm2pyError
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition

__all__ = ["BeforeSyncsError", "BeyondMirroredError", "Direction", "NotMirroredError", "PartitionMap",
           "PastLogEndError", "TranslationError"]


class Direction(StrEnum):
    """Which way an offset is translated: ``forward`` source → target (failover), ``back`` target →
    source (failback)."""

    FORWARD = "forward"
    BACK = "back"


class TranslationError(Mm2pyError):
    """An offset that cannot be translated exactly; says which partition and offset, and why."""

    def __init__(self, message: str, partition: TopicPartition | None = None, offset: int | None = None
                 ) -> None:
        super().__init__(message)
        self.partition = partition
        self.offset = offset


class NotMirroredError(TranslationError):
    """The flow holds no committed position with a target offset, or no offset syncs, for the partition."""


class BeforeSyncsError(TranslationError):
    """The offset lies before the oldest offset sync still known for its partition."""


class BeyondMirroredError(TranslationError):
    """The offset lies past what the flow had mirrored and committed."""


class PastLogEndError(TranslationError):
    """The translated position lies past the other cluster's log end now (its partition was
    truncated or created again since the flow committed): a consumer there would have a negative
    lag."""


def _era(downstream: Sequence[int]) -> int:
    """Index of the first sync of the newest run of strictly increasing downstream offsets: syncs
    before a downstream offset that went back name a target partition since deleted and created
    again, and do not apply to the current one."""
    for i in range(len(downstream) - 1, 0, -1):
        if downstream[i] <= downstream[i - 1]:
            return i
    return 0


@dataclass(frozen=True)
class PartitionMap:
    """One source partition's exact map between its source and target offsets (see the module).

    ``upstream``/``downstream``: the syncs below the committed position, ascending, of the current
    target era; ``position``: the committed position ``(P, T)``."""

    partition: TopicPartition
    upstream: tuple[int, ...]
    downstream: tuple[int, ...]
    position: Position

    @classmethod
    def of(cls, tp: TopicPartition, syncs: Sequence[tuple[int, int]], position: Position | None
           ) -> PartitionMap:
        """The map of ``tp`` from its syncs (``(upstream, downstream)`` by upstream offset, as
        :meth:`OffsetSyncStore.syncs` gives them) and its committed position."""
        if position is None or position.target is None:
            why = "no committed position" if position is None else (
                "a committed position without a target offset (written by MirrorMaker 2?)")
            raise NotMirroredError(f"{tp}: the flow has {why}; it cannot be translated exactly", tp)
        kept = [(u, d) for u, d in syncs if u < position.source and d < position.target]
        start = _era([d for _, d in kept])
        ups = tuple(u for u, _ in kept[start:])
        downs = tuple(d for _, d in kept[start:])
        return cls(tp, ups, downs, position)

    @property
    def source_end(self) -> int:
        """``P``: the next source offset the flow had not mirrored when it committed."""
        return self.position.source

    @property
    def target_end(self) -> int:
        """``T``: the target offset ``P`` maps to."""
        assert self.position.target is not None
        return self.position.target

    def translate(self, offset: int, direction: Direction) -> int:
        return self.forward(offset) if direction is Direction.FORWARD else self.back(offset)

    def forward(self, upstream: int) -> int:
        """The target position of source position ``upstream`` (the next source offset a consumer
        would read)."""
        tp, end = self.partition, self.source_end
        if upstream == end:
            return self.target_end
        if upstream > end:
            raise BeyondMirroredError(
                f"{tp}: source offset {upstream} is past what the flow has mirrored (up to {end})",
                tp, upstream)
        i = bisect.bisect_right(self.upstream, upstream) - 1
        if i < 0:
            raise self._before(upstream, self.upstream, "source")
        result = self.downstream[i] + (upstream - self.upstream[i])
        if i + 1 < len(self.downstream):
            result = min(result, self.downstream[i + 1])
        return min(result, self.target_end)

    def back(self, downstream: int) -> int:
        """The source position of target position ``downstream`` (the next target offset a consumer
        would read)."""
        tp, end = self.partition, self.target_end
        if downstream == end:
            return self.source_end
        if downstream > end:
            raise BeyondMirroredError(
                f"{tp}: target offset {downstream} is past what the flow has mirrored (up to {end})",
                tp, downstream)
        i = bisect.bisect_right(self.downstream, downstream) - 1
        if i < 0:
            raise self._before(downstream, self.downstream, "target")
        return min(self.upstream[i] + (downstream - self.downstream[i]), self.source_end)

    def _before(self, offset: int, anchors: tuple[int, ...], side: str) -> TranslationError:
        tp = self.partition
        if not anchors:
            return NotMirroredError(
                f"{tp}: no offset sync below the committed position is known; only {side} offset "
                f"{self.source_end if side == 'source' else self.target_end} translates", tp, offset)
        return BeforeSyncsError(
            f"{tp}: {side} offset {offset} lies before the oldest offset sync still known "
            f"({side} offset {anchors[0]})", tp, offset)
