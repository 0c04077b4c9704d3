"""Incremental fetch sessions (KIP-227) against a real broker that keeps eight sessions at most.

Every offset is read exactly once while partitions leave and join the session, while the session
is lost (closed on the broker by another client, as an eviction does), while another fetcher finds
no free session slot, and across a broker restart.

The broker's session cache has eight shards, each with an eighth of the slots, and takes them in
turn for new sessions: with eight slots, the ninth session asked for (while none was closed) finds
its shard's only slot taken by a session too recent to evict (Kafka's ``FetchSessionCache``).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from mm2py.client.cluster import ClusterClient
from mm2py.client.fetcher import FetcherConfig, RawFetcher
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.api import ApiKey, decode_fetch_response, encode_fetch_request
from mm2py.protocol.fetch_session import FINAL_EPOCH
from mm2py.protocol.types import TopicPartition
from tests.support.brokers import create_topic, end_offsets, make_records, produce_records, unique

pytestmark = pytest.mark.integration

PARTITIONS = 4


class Reader:
    """Fetches over some partitions, recording every offset each one returns."""

    def __init__(self, client: ClusterClient, tps: list[TopicPartition]) -> None:
        self.fetcher = RawFetcher(client, FetcherConfig(sessions=True, max_wait_ms=50))
        self.pos = {tp: 0 for tp in tps}
        self.seen: dict[TopicPartition, list[int]] = {tp: [] for tp in tps}

    async def fetches(self, n: int, only: Iterable[TopicPartition] | None = None) -> None:
        wanted = list(self.pos if only is None else only)
        for _ in range(n):
            got = await self.fetcher.fetch({tp: self.pos[tp] for tp in wanted})
            for tp, f in got.items():
                assert f.ok, f.error_name
                for b in f.batches:
                    self.seen[tp].extend(range(b.base_offset, b.next_offset))
                self.pos[tp] = f.next_offset

    async def catch_up(self, ends: dict[TopicPartition, int]) -> None:
        for _ in range(200):
            if all(self.pos[tp] >= e for tp, e in ends.items()):
                return
            await self.fetches(1)
        raise AssertionError(f"not caught up: at {self.pos}, ends {ends}")

    def session(self) -> tuple[int, int, int, int]:
        """(session id, full requests, incremental requests, resets) of the one broker's session."""
        (s,) = self.fetcher.sessions.values()
        return s.session_id, s.full_requests, s.incremental_requests, s.resets


def produce(cluster: KafkaCluster, topic: str, per_partition: int, tag: str) -> None:
    recs = [r for p in range(PARTITIONS) for r in make_records(per_partition, partition=p, tag=f"{tag}{p}")]
    produce_records(cluster.bootstrap, topic, recs, linger_ms=0)


def ends_of(cluster: KafkaCluster, topic: str) -> dict[TopicPartition, int]:
    return {TopicPartition(topic, p): e for p, e in end_offsets(cluster.bootstrap, topic).items()}


async def close_on_broker(cluster: KafkaCluster, session_id: int) -> None:
    """What an eviction does to a session, done by another client: a full sessionless request
    naming the session closes it."""
    async with ClusterClient(cluster.bootstrap) as other:
        await other.refresh_metadata([])
        conn = await other.connection(1)
        version = other.version_for(conn, ApiKey.FETCH)
        body = encode_fetch_request(version, [], max_wait_ms=0, session_id=session_id,
                                    session_epoch=FINAL_EPOCH)
        resp = await conn.request(ApiKey.FETCH, version, body, decode_fetch_response)
        assert resp.error_code == 0


async def test_every_offset_once_through_session_changes_losses_and_a_restart(scarce: KafkaCluster) -> None:
    topic = create_topic(scarce.bootstrap, unique("fs"), PARTITIONS)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    async with ClusterClient(scarce.bootstrap) as client, ClusterClient(scarce.bootstrap) as client2:
        reader = Reader(client, tps)
        produce(scarce, topic, 30, "a")
        await reader.catch_up(ends_of(scarce, topic))
        await reader.fetches(3)  # nothing new: incremental requests with nothing to say
        sid, full, incremental, resets = reader.session()
        assert sid != 0 and full == 1 and incremental >= 3 and resets == 0

        # partitions leave the session and come back, with records written meanwhile
        produce(scarce, topic, 20, "b")
        await reader.fetches(4, only=tps[:2])
        assert reader.pos[tps[2]] == 30 and reader.pos[tps[0]] == 50
        await reader.catch_up(ends_of(scarce, topic))
        assert reader.session()[:2] == (sid, 1)  # still the first session, never a full request

        # every slot is taken: another fetcher gets no session and reads with full requests
        fillers = [Reader(client2, tps[:1]) for _ in range(7)]
        for f in fillers:
            await f.fetches(1)
            assert f.session()[0] != 0
        other = Reader(client2, tps)
        await other.catch_up(ends_of(scarce, topic))
        assert other.session()[0] == 0 and other.session()[2] == 0
        for f in fillers:
            await f.fetcher.close()  # closes their sessions on the broker

        # the session is lost on the broker: the next request finds out, a full one follows
        await close_on_broker(scarce, sid)
        produce(scarce, topic, 20, "c")
        await reader.catch_up(ends_of(scarce, topic))
        new_sid, _, _, resets = reader.session()
        assert resets == 1 and new_sid not in (0, sid)

        # the broker restarts: every session is gone, connections too
        scarce.stop()
        scarce.start()
        produce(scarce, topic, 20, "d")
        await reader.catch_up(ends_of(scarce, topic))
        assert reader.session()[3] >= 2

    ends = ends_of(scarce, topic)
    assert all(ends[tp] == 90 for tp in tps)
    for r in (reader, other):
        for tp in tps:
            assert r.seen[tp] == list(range(r.pos[tp])), f"{tp}: an offset missed or read twice"
    assert all(other.pos[tp] == 50 for tp in tps)
