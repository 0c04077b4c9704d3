"""LiveGroupSync's steps on a stand-in checkpoint connector and feed: commit -> exact checkpoint ->
target sync; unreadable records, a refused feed, a failing step: logged, counted, the loop goes on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from mm2py.config.filters import GroupFilter
from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.connectors.live_sync import LiveGroupSync
from mm2py.engine.checkpoints import CheckpointLog
from mm2py.engine.latency import Histogram
from mm2py.engine.live_groups import AcknowledgedView
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.consumer_offsets import (
    CommittedOffset,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from mm2py.protocol.mm2_records import Checkpoint, OffsetSync
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin_types import GroupOffset
from mm2py.stores.commit_feed import CommitFeedRefusedError, RawRecord

TP = TopicPartition("orders", 0)
TARGET = TopicPartition("east.orders", 0)


def _flow(**settings: object) -> FlowConfig:
    return MirrorMakerConfig.from_mapping({
        "clusters": {"east": "127.0.0.1:1", "west": "127.0.0.1:2"},
        # poll: no librdkafka consumer is made; the tests put a stand-in feed in
        "flows": {"east->west": {"groups": "app-.*", "sync.group.offsets.enabled": True,
                                 "mm2py.sync.group.offsets.live.mode": "poll", **settings}},
    }).enabled_flows()[0]


@dataclass
class Metrics:
    failures: int = 0
    last_error: str | None = None
    sync_latency: Histogram = field(default_factory=Histogram)


class SourceAdmin:
    timeout = 5.0

    def __init__(self) -> None:
        self.offsets: dict[str, dict[TopicPartition, GroupOffset]] = {}
        self.asked: list[list[str]] = []

    def group_offsets(self, groups: list[str]) -> dict[str, dict[TopicPartition, GroupOffset]]:
        self.asked.append(list(groups))
        return {g: dict(self.offsets.get(g, {})) for g in groups}


class Connector:
    """What LiveGroupSync uses of a CheckpointConnector, in memory."""

    def __init__(self, flow: FlowConfig) -> None:
        self.flow = flow
        self.group_filter: GroupFilter = flow.group_filter()
        self.mirrored = lambda topic: topic == "orders"
        self.rename = lambda topic: f"east.{topic}"
        self.source_admin: Any = SourceAdmin()
        self.syncs = OffsetSyncStore()
        self.latest = CheckpointLog()
        self.groups: list[str] = []
        self.metrics = Metrics()
        self.written: list[Checkpoint] = []
        self.synced: list[list[str]] = []
        self.emits = True
        self.fail_sync = False
        self._progress: dict[TopicPartition, Position] = {}

    @property
    def progress(self) -> Mapping[TopicPartition, Position]:
        return self._progress

    def add_group(self, group: str) -> None:
        self.groups.append(group)

    def refresh_groups(self) -> list[str]:
        return self.groups

    def catch_up_topics(self) -> bool:
        return True

    def write_checkpoints(self, checkpoints: list[Checkpoint]) -> None:
        self.written.extend(checkpoints)

    def sync_groups(self, groups: list[str]) -> dict[str, int]:
        if self.fail_sync:
            raise RuntimeError("target unreachable")
        self.synced.append(groups)
        return {g: 1 for g in groups}


class Feed:
    def __init__(self) -> None:
        self.batches: list[list[RawRecord] | Exception] = []
        self.closed = False

    def poll(self, timeout: float) -> list[RawRecord]:
        item = self.batches.pop(0) if self.batches else []
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self.closed = True


def _record(group: str, offset: int, ts: int = 1_000) -> RawRecord:
    return (0, 0, encode_offset_commit_key(group, TP),
            encode_offset_commit_value(CommittedOffset(offset, "meta", ts), 4))


def _live(cp: Connector, positions: dict[TopicPartition, Position]) -> tuple[LiveGroupSync, Feed]:
    view = AcknowledgedView()
    view.positions = positions  # as the tasks' acknowledged batches left them
    view.add_syncs([OffsetSync(TP, 0, 0), OffsetSync(TP, 21, 20)])  # a control record at 20
    live = LiveGroupSync(cp, view)
    feed = Feed()
    live.feed, live.mode = feed, "consumer-offsets"  # type: ignore[assignment]
    return live, feed


def test_a_commit_is_checkpointed_and_synced_once_the_tasks_have_passed_it() -> None:
    cp = Connector(_flow())
    positions = {TP: Position(30, 29)}
    live, _ = _live(cp, positions)
    asyncio.run(live.step([_record("app-1", 40)]))
    assert cp.groups == ["app-1"] and not cp.written and live.status()["waiting"] == 1
    positions[TP] = Position(41, 40)  # the tasks' next acknowledgement
    asyncio.run(live.step([]))
    assert cp.written == [Checkpoint("app-1", TARGET, 40, 39, "meta")]
    assert cp.synced == [["app-1"]] and cp.latest.get("app-1") == {TARGET: cp.written[0]}
    assert cp.metrics.sync_latency.count == 1
    # the same commit again changes nothing on the target (MM2's rule: an unchanged checkpoint)
    asyncio.run(live.step([_record("app-1", 40)]))
    assert len(cp.written) == 1 and len(cp.synced) == 1
    assert live.status() == {"mode": "consumer-offsets", "commits": 2, "waiting": 0,
                             "left_to_periodic": 0, "unreadable_records": 0}


def test_without_checkpoint_records_the_sync_still_happens() -> None:
    cp = Connector(_flow(**{"emit.checkpoints.enabled": False}))
    cp.emits = False
    live, _ = _live(cp, {TP: Position(50, 49)})
    asyncio.run(live.step([_record("app-1", 40)]))
    assert not cp.written and cp.synced == [["app-1"]]


def test_other_groups_are_left_alone() -> None:
    cp = Connector(_flow())
    live, _ = _live(cp, {TP: Position(50, 49)})
    asyncio.run(live.step([_record("billing", 40)]))
    assert not cp.groups and not cp.written and live.status()["commits"] == 0


def test_unreadable_records_are_counted_and_their_group_read_with_offset_fetch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cp = Connector(_flow())
    cp.source_admin.offsets["app-2"] = {TP: GroupOffset(25)}
    live, _ = _live(cp, {TP: Position(50, 49)})
    garbage: list[RawRecord] = [
        (0, 1, b"\x00", b""),  # a key too short to name anything
        (0, 2, encode_offset_commit_key("app-2", TP), b"\x00\x09" + bytes(20)),  # an unknown value version
        (0, 3, encode_offset_commit_key("nope", TP), b"\xff"),  # not selected: not read again
    ]
    with caplog.at_level(logging.WARNING, "mm2py.connectors.live_sync"):
        asyncio.run(live.step([*garbage, _record("app-1", 30)]))
    assert live.unreadable == 3
    assert len([r for r in caplog.records if "could not be read" in r.getMessage()]) == 1  # once a minute
    assert cp.source_admin.asked == [["app-2"]]
    assert sorted((c.group, c.downstream_offset) for c in cp.written) == [("app-1", 29), ("app-2", 24)]


def test_a_feed_refused_at_start_or_later_falls_back_to_polling(caplog: pytest.LogCaptureFixture) -> None:
    cp = Connector(_flow())
    cp.groups = ["app-1"]
    cp.source_admin.offsets["app-1"] = {TP: GroupOffset(10)}
    live, feed = _live(cp, {TP: Position(50, 49)})
    feed.batches = [CommitFeedRefusedError("reading __consumer_offsets refused: TOPIC_AUTHORIZATION_FAILED")]
    stop = asyncio.Event()

    async def main() -> None:
        with caplog.at_level(logging.WARNING, "mm2py.connectors.live_sync"):
            assert await live._next(stop) == []
        assert live.mode == "poll" and live.feed is None and feed.closed
        await live.step([])  # the first poll: the group list, then the groups' offsets
    asyncio.run(main())
    assert "polls the groups' offsets every 500 ms" in caplog.text
    assert "DESCRIBE and READ" in caplog.text
    assert cp.source_admin.asked == [["app-1"]]
    assert [c.downstream_offset for c in cp.written] == [10]


def test_a_failing_step_is_counted_and_the_loop_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    cp = Connector(_flow())
    cp.fail_sync = True
    live, feed = _live(cp, {TP: Position(50, 49)})
    feed.batches = [[_record("app-1", 40)], [], []]
    monkeypatch.setattr("mm2py.connectors.live_sync.sleep_or_stop", _no_sleep)
    stop = asyncio.Event()

    async def main() -> None:
        task = asyncio.create_task(live.run(stop, asyncio.Lock()))
        while cp.metrics.failures < 1:
            await asyncio.sleep(0.01)
        cp.fail_sync = False
        while not cp.synced:  # the commit waits on and is synced once the target answers
            await asyncio.sleep(0.01)
        stop.set()
        await task
    asyncio.run(asyncio.wait_for(main(), 10))
    assert cp.metrics.last_error == "live group sync: RuntimeError: target unreachable"
    assert cp.synced == [["app-1"]]


async def _no_sleep(stop: asyncio.Event, seconds: float) -> bool:
    await asyncio.sleep(0)
    return stop.is_set()


def test_a_checkpoint_that_could_not_be_written_waits_again() -> None:
    cp = Connector(_flow())
    live, _ = _live(cp, {TP: Position(50, 49)})

    def refuse(checkpoints: list[Checkpoint]) -> None:
        raise RuntimeError("checkpoints topic unwritable")
    cp.write_checkpoints = refuse  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="unwritable"):
        asyncio.run(live.step([_record("app-1", 40)]))
    assert live.status()["waiting"] == 1 and not cp.latest.get("app-1") and not cp.synced
    del cp.write_checkpoints  # the class's own again
    asyncio.run(live.step([]))
    assert [c.downstream_offset for c in cp.written] == [39] and cp.synced == [["app-1"]]
