"""The values the admin client takes and returns: topics to create, topics found, group offsets and
states (plain data, no I/O)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

T = TypeVar("T")

__all__ = ["CONTROLLER_RECORDS_PER_CALL", "GroupOffset", "GroupState", "TopicInfo", "TopicSpec", "in_calls"]

#: what one topic-creating admin call may ask of a KRaft controller: it refuses a change of more
#: than 10,000 metadata records at once ("excessively large batch operation"); a topic costs one
#: record, one per partition and one per config entry. Half of it leaves room for the replicas'
#: directory assignments and for whatever Kafka counts beyond that.
CONTROLLER_RECORDS_PER_CALL = 5000


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: name, partitions, replication factor (-1: the broker's default), configs."""

    name: str
    partitions: int
    replication_factor: int = -1
    config: Mapping[str, str] = field(default_factory=dict)


def in_calls(items: Iterable[T], records: Callable[[T], int],
             limit: int = CONTROLLER_RECORDS_PER_CALL) -> list[list[T]]:
    """``items`` in order, split into calls of at most ``limit`` metadata records each (an item
    larger than the limit goes alone: the controller says what it thinks of it)."""
    calls: list[list[T]] = []
    size = 0
    for item in items:
        n = records(item)
        if not calls or size + n > limit:
            calls.append([])
            size = 0
        calls[-1].append(item)
        size += n
    return calls


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    replication_factor: int


class GroupOffset(NamedTuple):
    """A consumer group's committed offset of one partition, with its metadata string."""

    offset: int
    metadata: str = ""


@dataclass(frozen=True)
class GroupState:
    """What the group coordinator says about a consumer group (``NOT_FOUND``: no such group)."""

    state: str  # EMPTY, STABLE, PREPARING_REBALANCING, COMPLETING_REBALANCING, DEAD, UNKNOWN, NOT_FOUND
    members: int = 0

    @property
    def inactive(self) -> bool:
        """No consumer uses the group: its offsets may be changed from outside (MM2's rule)."""
        return self.members == 0 and self.state in ("EMPTY", "DEAD", "NOT_FOUND")
