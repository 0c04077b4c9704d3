"""Small value types shared by the protocol layer and everything above it."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A (topic, partition) pair. Ordered by topic, then partition; hashable and picklable."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
