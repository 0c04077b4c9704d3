"""The one back-off helper (``mm2py.retry``) and each caller's numbers through it: what every retry
loop waits, pinned where no other unit test pins it (the refused partitions' rests are pinned in
test_refusals.py, a failed Spark task's in test_spark_rounds.py and test_spark_leases.py)."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.client import cluster as cluster_module
from mm2py.client import fetch_hub as fetch_hub_module
from mm2py.client.errors import ClientError
from mm2py.client.fetch_hub import FetchHub, Linger
from mm2py.client.fetcher import FetchedPartition, FetcherConfig
from mm2py.client.producer import ProducerConfig, pipeline
from mm2py.connectors import mirror_source as source_module
from mm2py.connectors.mirror_source import MirrorSource
from mm2py.engine.starts import StartRetry
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.errors_codes import NOT_ENOUGH_REPLICAS_AFTER_APPEND
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka import admin as admin_module
from mm2py.rdkafka.admin import ClusterAdmin, GroupOffsetsRefusedError
from mm2py.rdkafka.admin_types import GroupOffset
from mm2py.retry import Backoff
from mm2py.runtime.inprocess import TASK_RESTART_BACKOFF
from mm2py.runtime.spark.driver.host_pool import HOST_RESUBMIT_BACKOFF
from mm2py.stores import progress_repair
from tests.support.fake_broker import A, FakeBroker, batch, producer_on

TP = TopicPartition("t", 0)


# -- the helper ---------------------------------------------------------------------------------
def test_a_doubling_backoff_grows_from_its_first_delay_to_its_maximum_and_starts_again_on_reset() -> None:
    b = Backoff(0.2, 5.0)
    assert [b.next_delay() for _ in range(8)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert [b.delay(n) for n in range(3)] == [0.2, 0.4, 0.8]  # delay(n): counts nothing
    b.reset()
    assert b.next_delay() == 0.2 and b.attempts == 1
    assert Backoff(0.5, 10.0).delay(10_000) == 10.0  # no overflow however long the trouble
    assert Backoff(3.0, 1.0).delay(0) == 3.0 and Backoff(3.0, 1.0).delay(1) == 1.0  # first waited
    assert Backoff(0.0, 0.0).delay(5) == 0.0
    assert Backoff(1.0, factor=3.0).delay(3) == 27.0 and Backoff(1.0).delay(2000) == math.inf


def test_a_linear_backoff_adds_its_first_delay_each_time_up_to_its_maximum() -> None:
    b = Backoff(0.5, 5.0, linear=True)
    assert [b.delay(n) for n in range(12)] == [0.5 * n for n in range(1, 11)] + [5.0, 5.0]
    assert [Backoff(0.2, linear=True).delay(n) for n in range(3)] == [0.2, 0.2 * 2, 0.2 * 3]


def test_a_timeout_counts_from_when_the_trouble_began() -> None:
    b = Backoff(0.1, 1.0, timeout=2.0)
    assert not b.expired(1e9) and b.left(1e9) == math.inf  # not begun
    b.reset(since=10.0)
    assert not b.expired(11.9) and b.expired(12.0) and b.left(11.5) == 0.5
    assert not Backoff(0.1, since=0.0).expired(1e9)  # no time-out: never


# -- its callers' numbers -----------------------------------------------------------------------
class Sleeps:
    """Stands for a module's ``asyncio`` (or ``time``): sleeps are recorded and take no time but on
    a clock of their own (``monotonic``)."""

    def __init__(self, real: Any) -> None:
        self.real, self.slept, self.now = real, [], 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def monotonic(self) -> float:
        return self.now

    def _sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class AsyncSleeps(Sleeps):
    async def sleep(self, seconds: float) -> None:
        self._sleep(seconds)
        await self.real.sleep(0)


class SyncSleeps(Sleeps):
    def sleep(self, seconds: float) -> None:
        self._sleep(seconds)


class FailingFetcher:
    """Raises ``errors`` in turn, then answers with nothing new."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)

    async def fetch(self, positions: Mapping[TopicPartition, int], **_: Any) -> dict[TopicPartition, Any]:
        if self.errors:
            raise self.errors.pop(0)
        return {tp: FetchedPartition(tp, o, next_offset=o) for tp, o in positions.items()}

    async def close(self) -> None:
        return None


class Metadata:
    generation = 0

    def topic_id(self, topic: str) -> None:
        return None

    def leader_of(self, tp: TopicPartition) -> int:
        return 1

    async def refresh_metadata(self, topics: Any = None) -> None:
        return None


def _corrupt() -> CorruptBatchError:
    exc = CorruptBatchError("bad crc")
    exc.partition = TP
    return exc


async def test_a_task_source_waits_0_5_s_more_per_failed_fetch_up_to_5_s_and_0_2_s_per_corrupt_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sleeps = AsyncSleeps(asyncio)
    monkeypatch.setattr(source_module, "asyncio", sleeps)
    source = MirrorSource(Metadata())  # type: ignore[arg-type]
    source.fetcher = FailingFetcher(*[ClientError("down")] * 12)  # type: ignore[assignment]
    for _ in range(13):
        await source.poll({TP: 0})
    assert sleeps.slept == [0.5 * n for n in range(1, 11)] + [5.0, 5.0]
    sleeps.slept.clear()
    source.fetcher = FailingFetcher(_corrupt(), _corrupt(), _corrupt())  # type: ignore[assignment]
    with pytest.raises(CorruptBatchError):
        await source.poll({TP: 0})
    assert sleeps.slept == [0.2, 0.2 * 2]  # the third attempt (corrupt_retries) fails the task


async def test_a_failing_partition_of_a_task_source_rests_its_error_backoff_doubling() -> None:
    source = MirrorSource(Metadata(), error_backoff=(0.1, 5.0))  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    for want in [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]:
        before = loop.time()
        source._back_off(TP, "UNKNOWN_SERVER_ERROR")
        after = loop.time()  # the rest began between the two reads (a loaded machine may pause between)
        due = source._failing[TP][0]
        assert due - after - 1e-9 <= want <= due - before + 1e-9, (want, due - after, due - before)


def test_the_fetch_hub_waits_as_a_task_source_does(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> tuple[list[float], list[float]]:
        sleeps = AsyncSleeps(asyncio)
        monkeypatch.setattr(fetch_hub_module, "asyncio", sleeps)
        hub = FetchHub(Metadata(), FetcherConfig(), Linger(), corrupt_retries=3)  # type: ignore[arg-type]
        hub.fetcher = FailingFetcher(*[ClientError("down")] * 12)  # type: ignore[assignment]
        member = hub.member("t1", 1 << 20)
        await member.poll({TP: 0}, 5.0)
        unavailable = list(sleeps.slept)
        sleeps.slept.clear()
        hub.fetcher = FailingFetcher(_corrupt(), _corrupt(), _corrupt())  # type: ignore[assignment]
        with pytest.raises(CorruptBatchError):
            await member.poll({TP: 1}, 5.0)
        corrupt = list(sleeps.slept)
        await hub.close()
        return unavailable, corrupt

    unavailable, corrupt = asyncio.run(main())
    assert unavailable == [0.5 * n for n in range(1, 11)] + [5.0, 5.0]
    assert corrupt == [0.2, 0.2 * 2]


async def test_the_raw_clients_retries_double_and_never_sleep_past_the_time_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sleeps = AsyncSleeps(asyncio)
    monkeypatch.setattr(cluster_module, "asyncio", sleeps)
    backoff = cluster_module.deadline_backoff(0.05, 2.0, 3600.0)
    for _ in range(9):
        await cluster_module.back_off(backoff)
    assert sleeps.slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]
    assert not cluster_module.backoff_expired(backoff)
    short = cluster_module.deadline_backoff(5.0, 10.0, 0.01)
    await cluster_module.back_off(short)
    assert sleeps.slept[-1] <= 0.01  # the time left, not the 5 s
    await asyncio.sleep(0.02)
    assert cluster_module.backoff_expired(short)


@pytest.mark.native_path  # the produce path reaches native's stand-ins
async def test_a_produce_lane_re_sends_after_the_clusters_retry_backoff_doubling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waited: list[float] = []

    class Recorded(Backoff):
        def next_delay(self) -> float:
            waited.append(delay := super().next_delay())
            return delay

    monkeypatch.setattr(pipeline, "Backoff", Recorded)
    fb = FakeBroker()
    producer = await producer_on(fb, ProducerConfig(retry_timeout_s=0.5))
    fb.refuse["a0"] = NOT_ENOUGH_REPLICAS_AFTER_APPEND  # retried (NOT_ENOUGH_REPLICAS waits instead)
    with pytest.raises(Exception):  # noqa: B017 - the lane gives up after the retry time-out
        await producer.produce([(A, batch("a0"))])
    first, most = producer.cluster.config.retry_backoff_s, producer.cluster.config.retry_backoff_max_s
    assert (first, most) == (0.05, 2.0)
    assert len(waited) >= 3 and waited[:3] == [0.05, 0.1, 0.2]


def test_a_deferred_start_is_asked_for_again_0_2_s_later_doubling_to_5_s(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    retry = StartRetry(lambda: now[0])
    with caplog.at_level(logging.INFO, logger="mm2py.engine.starts"):
        for _ in range(7):
            retry.defer(0, [TP])
    delays = [r.args[-1] for r in caplog.records if isinstance(r.args, tuple)]
    assert delays == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert not retry.due()
    now[0] += 5.0
    assert retry.due()
    retry.reset()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mm2py.engine.starts"):
        retry.defer(0, [TP])
    assert [r.args[-1] for r in caplog.records if isinstance(r.args, tuple)] == [0.2]


def test_a_group_offsets_commit_is_retried_0_1_s_doubling_to_1_s_while_it_ends_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = SyncSleeps(admin_module.time)
    monkeypatch.setattr(admin_module, "time", clock)
    admin = ClusterAdmin("east", "127.0.0.1:1", timeout=3.0)
    refused = [KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)]
    monkeypatch.setattr(admin, "_alter_group_offsets_once", lambda group, offsets: refused)
    with pytest.raises(GroupOffsetsRefusedError):
        admin.alter_group_offsets("g", {TP: GroupOffset(5)})
    # 2.5 s waited: one more second would end past the 3 s time-out
    assert clock.slept == [0.1, 0.2, 0.4, 0.8, 1.0]


class RefusingAdmin:
    """Refuses every deletion with POLICY_VIOLATION."""

    def delete_records(self, tps: list[CKTopicPartition], **_: Any) -> dict[CKTopicPartition, Future[Any]]:
        out = {}
        for tp in tps:
            fut: Future[Any] = Future()
            fut.set_exception(KafkaException(KafkaError(KafkaError.POLICY_VIOLATION)))
            out[tp] = fut
        return out


def test_a_refused_deletion_is_asked_again_0_1_s_doubling_to_1_s_until_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = SyncSleeps(progress_repair.time)
    monkeypatch.setattr(progress_repair, "time", clock)
    with pytest.raises(KafkaException):
        progress_repair._delete_below(RefusingAdmin(), "p", {0: 5}, timeout=2.0)  # type: ignore[arg-type]
    assert clock.slept == [0.1, 0.2, 0.4, 0.8, 1.0]  # 2.5 s: past the 2 s time-out, it ends


def test_failed_tasks_and_mirror_hosts_come_back_after_0_5_s_doubling() -> None:
    assert [TASK_RESTART_BACKOFF.delay(n) for n in range(9)] == [0.5, 1, 2, 4, 8, 16, 32, 60, 60]
    assert [HOST_RESUBMIT_BACKOFF.delay(n) for n in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
