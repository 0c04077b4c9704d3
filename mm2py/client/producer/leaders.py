"""Lanes whose partition has no known leader: the metadata is refreshed in the background (one
refresh at a time, of every topic that waits), and a lane gives up once the retry time-out passed
since its trouble began.
Used by :mod:`.pipeline`; the lane's bookkeeping is in :mod:`.lanes`."""

from __future__ import annotations

import asyncio
import contextlib
import time

from mm2py.client.errors import ClientError, NoLeaderError
from mm2py.client.producer.lanes import Lane
from mm2py.client.producer.requests import ProduceRequests
from mm2py.protocol.types import TopicPartition

__all__ = ["LeaderWait"]


class LeaderWait:
    """The pipeline's collaborator for partitions without a known leader."""

    def __init__(self, requests: ProduceRequests, wake: asyncio.Event) -> None:
        self.requests = requests
        self._wake = wake  # set once a refresh is done: the lanes are looked at again
        #: the one refresh under way (guards against a refresh per lane and pass)
        self.refresh: asyncio.Task[None] | None = None
        #: topics of lanes that waited since the refresh under way began: the next one asks them
        #: all (a producer that first meets forty topics at once asked for them one by one, each
        #: after the back-off: seconds for the last)
        self._waiting: set[str] = set()

    def wait(self, tp: TopicPartition, lane: Lane) -> NoLeaderError | None:
        """No leader known for ``tp``: a refresh is started if none is under way; the error to
        stop the lane with once the retry time-out passed since its trouble began."""
        now = time.monotonic()
        if lane.trouble_since is None:
            lane.trouble_since = now
        elif now - lane.trouble_since > self.requests.config.retry_timeout_s:
            return NoLeaderError(f"no leader known for {tp}")
        self._waiting.add(tp.topic)
        if self.refresh is None or self.refresh.done():
            topics, self._waiting = self._waiting, set()
            self.refresh = asyncio.create_task(self._refresh_metadata(topics))
        return None

    async def _refresh_metadata(self, topics: set[str]) -> None:
        cluster = self.requests.cluster
        cluster.invalidate(topics)
        await asyncio.sleep(cluster.config.retry_backoff_s)
        with contextlib.suppress(ClientError):
            await cluster.refresh_metadata(topics)
        self._wake.set()
