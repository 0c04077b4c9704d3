"""What ``mm2py audit`` compares: the flow's clients, its partitions and their ends.

The clusters are read with mm2py's own raw client (batches as bytes, never decompressed on the
way in). A cluster that does not answer within the flow's ``mm2py.unreachable.timeout.ms`` is a
:class:`~mm2py.errors.ClusterUnreachableError` naming it. The partitions are those of the source
topics the flow mirrors (MM2's rule: its topic filter, no internal topic, no cycle), narrowed by
``--topics``; each is paired with its remote partition. Ends are read target first, then source,
both as the mirror reads (up to the last stable offset under read_committed), so every record on
the target was mirrored from below the source end the audit works to.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

from mm2py.client.cluster import EARLIEST, LATEST, ClusterClient
from mm2py.client.errors import ClientError
from mm2py.config.models import FlowConfig
from mm2py.connectors.client_settings import RawClientSettings, raw_client_settings
from mm2py.engine.audit import Ends
from mm2py.engine.controller import mm2_selects
from mm2py.errors import ClusterUnreachableError, Mm2pyError
from mm2py.protocol.types import TopicPartition

__all__ = ["STUCK_FETCHES", "AuditError", "Clients", "Pair", "connected", "mirrored_topics", "pairs_and_ends"]

#: fetches in a row that bring a partition nothing although the broker had room for it (below the
#: end it had when the audit began) before it is given up on
STUCK_FETCHES = 50


class AuditError(Mm2pyError):
    """The audit cannot read what it must to run at all (the offset-syncs or progress topic)."""


@dataclass(frozen=True)
class Pair:
    """A source partition and its remote partition."""

    source: TopicPartition
    target: TopicPartition


@dataclass
class Clients:
    flow: FlowConfig
    settings: RawClientSettings
    source: ClusterClient
    target: ClusterClient

    def of(self, alias: str) -> ClusterClient:
        return self.source if alias == self.flow.source else self.target


async def _start(alias: str, client: ClusterClient, bootstrap: str, timeout: float) -> None:
    try:
        await asyncio.wait_for(client.start(), timeout)
    except (TimeoutError, ClientError) as exc:
        reason = str(exc) or f"no answer within {timeout:g}s"
        raise ClusterUnreachableError(f"cluster '{alias}' ({bootstrap}) is unreachable: {reason}") from None


@contextlib.asynccontextmanager
async def connected(flow: FlowConfig) -> AsyncIterator[Clients]:
    """Raw clients of the flow's source and target clusters, started."""
    settings = raw_client_settings(flow, fetch_max_bytes=flow.fetch_max_bytes)
    timeout = max(flow.unreachable_timeout_ms / 1000, 1.0)
    clients = Clients(flow, settings,
                      ClusterClient(flow.source_cluster.bootstrap_servers, settings.source_client),
                      ClusterClient(flow.target_cluster.bootstrap_servers, settings.target_client))
    try:
        for cluster, client in ((flow.source_cluster, clients.source), (flow.target_cluster, clients.target)):
            # a cluster that refuses us fails within the timeout, with the reason, rather than
            # after the client's own retries (its later requests retry as long as usual)
            full = client.config
            client.config = dataclasses.replace(full, retry_timeout_s=timeout)
            try:
                await _start(cluster.alias, client, cluster.bootstrap_servers, timeout + 2)
            finally:
                client.config = full
        yield clients
    finally:
        await clients.source.close()
        await clients.target.close()


def mirrored_topics(flow: FlowConfig, names: Iterable[str], only: re.Pattern[str] | None) -> dict[str, str]:
    """Source topic -> remote topic, for the source topics the flow mirrors (and ``only`` matches)."""
    policy, topic_filter = flow.replication_policy(), flow.topic_filter()
    return {
        name: policy.format_remote_topic(flow.source, name) for name in sorted(names)
        if mm2_selects(name, policy, topic_filter, flow.target, flow.heartbeats_replication_enabled)
        and (only is None or only.fullmatch(name))
    }


async def pairs_and_ends(
    clients: Clients, only: re.Pattern[str] | None
) -> tuple[dict[Pair, Ends], list[str]]:
    """Every partition pair to audit with its ends, and the notes on what is left out (remote
    topics missing, partitions the target lacks)."""
    source, target = clients.source, clients.target
    await source.refresh_metadata(None)
    topics = mirrored_topics(clients.flow, [t for t, m in source.topics.items() if not m.is_internal], only)
    notes: list[str] = []
    if topics:
        await target.refresh_metadata(sorted(topics.values()))
    pairs: list[Pair] = []
    for topic, remote in topics.items():
        there = set(target.partitions_for(remote))
        if not there:
            notes.append(f"{remote}: not on '{clients.flow.target}' (nothing of {topic} mirrored yet)")
        for p in source.partitions_for(topic):
            if p in there:
                pairs.append(Pair(TopicPartition(topic, p), TopicPartition(remote, p)))
            elif there:
                notes.append(f"{remote}-{p}: not on '{clients.flow.target}' yet")
    return await _ends(clients, pairs), notes


async def _ends(clients: Clients, pairs: Sequence[Pair]) -> dict[Pair, Ends]:
    if not pairs:
        return {}
    isolation = clients.settings.fetcher.isolation_level
    targets = [p.target for p in pairs]
    t_low = await clients.target.list_offsets(targets, EARLIEST)
    t_high = await clients.target.list_offsets(targets, LATEST, isolation_level=isolation)
    sources = [p.source for p in pairs]
    s_low = await clients.source.list_offsets(sources, EARLIEST)
    s_high = await clients.source.list_offsets(sources, LATEST, isolation_level=isolation)
    return {p: Ends(s_low[p.source], s_high[p.source], t_low[p.target], t_high[p.target]) for p in pairs}
