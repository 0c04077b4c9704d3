"""LeaderWait: lanes whose partition has no known leader share one metadata refresh at a time,
and the next refresh asks every topic that waited meanwhile (pure asyncio, no broker)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from mm2py.client.producer.leaders import LeaderWait
from mm2py.protocol.types import TopicPartition


class FakeCluster:
    def __init__(self) -> None:
        self.config = SimpleNamespace(retry_backoff_s=0.0)
        self.refreshed: list[list[str]] = []
        self.answer = asyncio.Event()

    def invalidate(self, topics: Any) -> None:
        pass

    async def refresh_metadata(self, topics: Any) -> None:
        self.refreshed.append(sorted(topics))
        await self.answer.wait()


async def test_topics_that_wait_during_a_refresh_are_all_asked_by_the_next() -> None:
    cluster = FakeCluster()
    requests = SimpleNamespace(cluster=cluster, config=SimpleNamespace(retry_timeout_s=60.0))
    leaders = LeaderWait(requests, asyncio.Event())  # type: ignore[arg-type]

    def lane() -> Any:
        return SimpleNamespace(trouble_since=None)

    assert leaders.wait(TopicPartition("a", 0), lane()) is None
    first = leaders.refresh
    for topic in ("b", "c", "b"):  # a refresh is under way: they wait for the next
        assert leaders.wait(TopicPartition(topic, 1), lane()) is None
    assert leaders.refresh is first
    for _ in range(100):  # the refresh task runs up to its question
        if cluster.refreshed:
            break
        await asyncio.sleep(0)
    assert cluster.refreshed == [["a"]]
    cluster.answer.set()
    assert first is not None
    await first
    assert leaders.wait(TopicPartition("d", 0), lane()) is None
    assert leaders.refresh is not None
    await leaders.refresh
    assert cluster.refreshed == [["a"], ["b", "c", "d"]]  # one refresh for all who waited
