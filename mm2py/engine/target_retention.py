"""Records the target deleted while the source still holds them (pure rules; issue 46 item 0).

A remote topic keeps what the mirror wrote for as long as *its own* settings say. When they are
shorter than the source's (a remote topic made beforehand with the broker's 7-day default for a
source kept forever, a backfill of year-old records), the target deletes records as soon as their
segment rolls, and a consumer failed over to the target would miss records the source still has.
Nothing in the data path sees it: the target's log *start* moves, not its end (``target.truncated``
is the end going back).

**EXACT_BY_RUN_SYNCS**: the sync history holds a point ``(U, D)`` where each run of contiguous
offsets begins (``engine/sync_history.py``), so the target offset of the first record the source
still holds, at its log start ``L``, is ``D + (L - U)`` for the newest ``U <= L``. When ``L`` lies
in a gap between runs this is past the true offset, never before it, so a loss is only ever
understated: the target's log start ``S`` past it means records the source holds are gone from the
target (:func:`deleted_on_target`). :func:`retention_cause` names the setting that did it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mm2py.protocol.types import TopicPartition

__all__ = ["RetentionLoss", "deleted_on_target", "retention_cause", "target_offset"]

#: the settings by which a topic deletes records, and Kafka's defaults for them
RETENTION_SETTINGS = {"cleanup.policy": "delete", "retention.ms": "604800000", "retention.bytes": "-1"}


@dataclass(frozen=True)
class RetentionLoss:
    """Source partition ``partition``'s records from ``source_start`` on are on the source; on the
    remote partition they begin at ``expected_start``, but the target's log starts at
    ``target_start``."""

    partition: TopicPartition
    remote: TopicPartition
    source_start: int
    expected_start: int
    target_start: int

    @property
    def offsets(self) -> int:
        """Offsets deleted on the target that the source still holds (at least)."""
        return self.target_start - self.expected_start

    def as_dict(self, cause: str) -> dict[str, object]:
        return {"partition": str(self.partition), "remote_partition": str(self.remote),
                "source_log_start": self.source_start, "expected_target_start": self.expected_start,
                "target_log_start": self.target_start, "offsets": self.offsets, "cause": cause}


def target_offset(syncs: Sequence[tuple[int, int]], source_offset: int) -> int | None:
    """Where ``source_offset`` lies on the target by the run syncs ``(U, D)`` (sorted by ``U``):
    ``D + (source_offset - U)`` for the newest ``U <= source_offset`` (None: before every run)."""
    i = bisect.bisect_right(syncs, (source_offset, float("inf"))) - 1
    if i < 0:
        return None
    upstream, downstream = syncs[i]
    return downstream + (source_offset - upstream)


def deleted_on_target(partition: TopicPartition, remote: TopicPartition, syncs: Sequence[tuple[int, int]],
                      source_start: int, target_start: int) -> RetentionLoss | None:
    """The loss if the target's log starts past the source's first record's place there."""
    expected = target_offset(syncs, source_start)
    if expected is None or target_start <= expected:
        return None
    return RetentionLoss(partition, remote, source_start, expected, target_start)


def retention_cause(remote_topic: str, source: Mapping[str, str] | None,
                    target: Mapping[str, str] | None) -> str:
    """The remote topic's setting that keeps less than the source's, in words (the configs may be
    unknown: None)."""
    if source is None or target is None:
        return (f"the target deleted them (its retention, or DeleteRecords); compare {remote_topic}'s "
                "retention.ms, retention.bytes and cleanup.policy with the source topic's")
    diffs = []
    for key, default in RETENTION_SETTINGS.items():
        mine, theirs = target.get(key, default), source.get(key, default)
        if mine != theirs and _keeps_less(key, mine, theirs):
            diffs.append(f"{key}={mine} (the source topic's: {theirs})")
    if diffs:
        return (f"{remote_topic} keeps less than its source: {', '.join(diffs)}; set them as the "
                "source's (or turn on sync.topic.configs.enabled)")
    return (f"{remote_topic}'s retention settings match the source's: the records were deleted on the "
            "target by other means (DeleteRecords, or a retention setting changed since)")


def _keeps_less(key: str, target: str, source: str) -> bool:
    if key == "cleanup.policy":  # compact keeps each key's newest record; delete drops them by age
        return "delete" in target.split(",") and "delete" not in source.split(",")
    try:
        mine, theirs = int(target), int(source)
    except ValueError:
        return True
    unlimited = -1
    if theirs == unlimited:
        return mine != unlimited
    return mine != unlimited and mine < theirs
