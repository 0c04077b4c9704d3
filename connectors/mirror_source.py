"""MirrorSource: the fetch side of a mirror task (raw record batches from source leaders).

Wraps :class:`mm2py.client.fetcher.RawFetcher`: it hands the task complete, CRC-verified batches,
the first one cropped to the requested offset, aborted transactions and control batches removed
(read_committed), and says where the next fetch starts. A batch that fails its CRC is never passed
on: the fetch is retried, and after ``corrupt_retries`` attempts the task fails with the position
unchanged, so nothing is skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from mm2py.client.cluster import EARLIEST, LATEST, ClusterClient
from mm2py.client.fetcher import FetcherConfig, RawFetcher
from mm2py.client.types import ClientError
from mm2py.engine.task_api import Polled, TaskError
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.errors_codes import OFFSET_OUT_OF_RANGE, BrokerError
from mm2py.protocol.types import TopicPartition

log = logging.getLogger(__name__)


class SourceError(TaskError):
    """The source cluster answered with an error the task cannot recover from."""


class MirrorSource:
    def __init__(
        self,
        cluster: ClusterClient,
        config: FetcherConfig | None = None,
        *,
        corrupt_retries: int = 3,
        reset_to_earliest: bool = True,
    ) -> None:
        self.cluster = cluster
        self.fetcher = RawFetcher(cluster, config)
        self.corrupt_retries = corrupt_retries
        self.reset_to_earliest = reset_to_earliest
        self.corrupt_batches_seen = 0
        self.unavailable_rounds = 0

    async def resolve_start(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """MM2's default for partitions never mirrored: start at the earliest offset."""
        if not partitions:
            return {}
        return await self.cluster.list_offsets(partitions, EARLIEST if self.reset_to_earliest else LATEST)

    async def poll(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, Polled]:
        attempt = 0
        while True:
            try:
                fetched = await self.fetcher.fetch(positions)
                self.unavailable_rounds = 0
                break
            except (ClientError, BrokerError) as exc:
                # source unreachable or leaderless beyond the client's own retries: report nothing
                # this round and try again; positions are unchanged, so nothing is skipped
                self.unavailable_rounds += 1
                log.warning("fetch from the source failed (%s); retrying", exc)
                await asyncio.sleep(min(5.0, 0.5 * self.unavailable_rounds))
                return {}
            except CorruptBatchError as exc:
                attempt += 1
                self.corrupt_batches_seen += 1
                log.error("corrupt batch from the source (attempt %d/%d), not forwarded: %s",
                          attempt, self.corrupt_retries, exc)
                if attempt >= self.corrupt_retries:
                    raise
                await asyncio.sleep(0.2 * attempt)
        out: dict[TopicPartition, Polled] = {}
        resets: list[TopicPartition] = []
        for tp, f in fetched.items():
            if f.error_code == OFFSET_OUT_OF_RANGE:
                resets.append(tp)
                continue
            if not f.ok:
                log.warning("fetch %s: %s", tp, f.error_name)
                continue
            out[tp] = Polled(f.batches, max(f.next_offset, f.fetch_offset), f.high_watermark,
                             fetch_offset=f.fetch_offset)
        if resets:
            earliest = await self.cluster.list_offsets(resets, EARLIEST)
            for tp in resets:
                out[tp] = Polled([], positions[tp], -1, reset_to=earliest[tp], fetch_offset=positions[tp])
        return out

    async def close(self) -> None:
        await self.cluster.close()
