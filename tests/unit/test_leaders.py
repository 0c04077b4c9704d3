"""mm2py.client.producer.leaders on the fake broker: a lane whose partition has no known leader gets
one metadata refresh at a time (the topic forgotten, then read again, then the lanes woken), and
gives up with NoLeaderError once the retry time-out passed since its trouble began."""

from __future__ import annotations

import asyncio
import time

import pytest

from mm2py.client.errors import ConnectionLostError, NoLeaderError
from mm2py.client.producer import ProducerConfig
from mm2py.client.producer.lanes import Lane
from mm2py.client.producer.leaders import LeaderWait
from tests.support.fake_broker import A, B, FakeBroker, producer_on

pytestmark = pytest.mark.native_path


async def test_one_refresh_at_a_time_reads_the_leader_again_and_wakes_the_lanes() -> None:
    fb = FakeBroker()
    producer = await producer_on(fb, ProducerConfig(retry_timeout_s=30.0))
    try:
        cluster = producer.requests.cluster
        await cluster.refresh_metadata([A.topic])
        assert cluster.leader_of(A) == 1
        wake = asyncio.Event()
        leaders = LeaderWait(producer.requests, wake)
        lane_a, lane_b = Lane(), Lane()
        asked = fb.metadata_requests
        before = time.monotonic()
        assert leaders.wait(A, lane_a) is None
        assert lane_a.trouble_since is not None and lane_a.trouble_since >= before
        first = leaders.refresh
        assert first is not None
        assert leaders.wait(B, lane_b) is None and leaders.refresh is first, "a second refresh under way"
        await asyncio.sleep(0)  # the refresh begins: the topic's metadata is forgotten first
        assert cluster.leader_of(A) is None
        await asyncio.wait_for(wake.wait(), 10 + cluster.config.retry_backoff_s)
        assert first.done() and fb.metadata_requests == asked + 1
        assert cluster.leader_of(A) == 1 and cluster.leader_of(B) == 1
        since = lane_a.trouble_since
        assert leaders.wait(A, lane_a) is None
        assert lane_a.trouble_since == since, "the trouble's start moved"
        assert leaders.refresh is not first, "no new refresh once the last one was done"
        await leaders.refresh
    finally:
        await producer.close()


async def test_the_lane_gives_up_once_the_retry_time_out_passed_since_its_trouble_began() -> None:
    fb = FakeBroker()
    producer = await producer_on(fb, ProducerConfig(retry_timeout_s=5.0))
    try:
        leaders = LeaderWait(producer.requests, asyncio.Event())
        lane = Lane(trouble_since=time.monotonic() - 4.0)
        assert leaders.wait(A, lane) is None, "gave up before the time-out"
        assert leaders.refresh is not None
        await leaders.refresh
        lane.trouble_since = time.monotonic() - 5.5
        refresh = leaders.refresh
        error = leaders.wait(A, lane)
        assert isinstance(error, NoLeaderError) and str(error) == f"no leader known for {A}"
        assert leaders.refresh is refresh, "a refresh started for a lane that gave up"
    finally:
        await producer.close()


async def test_a_refresh_that_fails_still_wakes_the_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    fb = FakeBroker()
    producer = await producer_on(fb)
    try:
        cluster = producer.requests.cluster

        async def unreachable(topics: object = None) -> None:
            raise ConnectionLostError("the broker went away")

        monkeypatch.setattr(cluster, "refresh_metadata", unreachable)
        wake = asyncio.Event()
        leaders = LeaderWait(producer.requests, wake)
        assert leaders.wait(A, Lane()) is None
        await asyncio.wait_for(wake.wait(), 10 + cluster.config.retry_backoff_s)
        assert leaders.refresh is not None and leaders.refresh.exception() is None
    finally:
        await producer.close()
