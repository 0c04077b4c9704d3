"""The values the admin client takes and returns: topics to create, topics found, group offsets and
states (plain data, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["GroupOffset", "GroupState", "TopicInfo", "TopicSpec"]


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: name, partitions, replication factor (-1: the broker's default), configs."""

    name: str
    partitions: int
    replication_factor: int = -1
    config: Mapping[str, str] = field(default_factory=dict)


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
