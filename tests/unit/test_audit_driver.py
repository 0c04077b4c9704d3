"""The audit's read loop over fake fetchers: both sides fed to every partition's walk until each is
done, a partition the broker has no room for is waited for, one that cannot be read fails alone."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from mm2py.client.fetched import FetchedPartition
from mm2py.engine.audit import (
    Anchor,
    AnchorBook,
    Ends,
    MismatchKind,
    OffsetRange,
    PartitionAudit,
    PartitionStatus,
)
from mm2py.operations.audit import driver
from mm2py.operations.audit.scope import Pair
from mm2py.protocol.errors_codes import OFFSET_OUT_OF_RANGE
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from tests.support.audit_batches import batches, end_of, mirrored

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path


class FakeFetcher:
    """Serves in-memory partitions a few batches per fetch; ``starve`` partitions get nothing the
    first ``starve[tp]`` times, as a broker out of room leaves them; ``errors`` answer an error."""

    logs: dict[TopicPartition, list[RecordBatch]] = {}
    starve: dict[TopicPartition, int] = {}
    errors: dict[TopicPartition, int] = {}

    def __init__(self, *_: Any) -> None:
        pass

    async def fetch(self, positions: Mapping[TopicPartition, int], *, sessions: bool) -> dict[
            TopicPartition, FetchedPartition]:
        out = {}
        for tp, offset in positions.items():
            if tp in self.errors:
                out[tp] = FetchedPartition(tp, offset, error_code=self.errors[tp])
                continue
            if self.starve.get(tp, 0) > 0:
                self.starve[tp] -= 1
                out[tp] = FetchedPartition(tp, offset, next_offset=offset, starved=True)
                continue
            got = [b for b in self.logs[tp] if b.next_offset > offset][:3]
            out[tp] = FetchedPartition(tp, offset, got, next_offset=got[-1].next_offset if got else offset)
        return out


def _audit(monkeypatch: pytest.MonkeyPatch, logs: dict[Pair, tuple[list[RecordBatch], list[RecordBatch]]]
           ) -> tuple[dict[Pair, PartitionAudit], driver.Progress]:
    monkeypatch.setattr(driver, "RawFetcher", FakeFetcher)
    FakeFetcher.logs = {}
    audits = {}
    for pair, (source, target) in logs.items():
        FakeFetcher.logs[pair.source], FakeFetcher.logs[pair.target] = source, target
        book = AnchorBook(0, 0)
        book.add_sync(0, 0)
        audits[pair] = PartitionAudit(Ends(0, end_of(source), 0, end_of(target)), book)
    clients: Any = SimpleNamespace(source=None, target=None,
                                   settings=SimpleNamespace(fetcher=SimpleNamespace(isolation_level=1)))
    seen: list[int] = []
    progress = asyncio.run(driver.compare(clients, audits, lambda p: seen.append(p.done)))
    assert seen == sorted(seen) and seen[-1] == len(logs)
    return audits, progress


def _pair(p: int) -> Pair:
    return Pair(TopicPartition("orders", p), TopicPartition("east.orders", p))


def test_every_partition_is_read_to_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    source = [batches(12, 10 + p, first_value=100 * p) for p in range(3)]
    FakeFetcher.starve = {_pair(1).source: 70}  # more fetches than a stuck partition is given
    FakeFetcher.errors = {}
    audits, progress = _audit(monkeypatch, {_pair(p): (source[p], mirrored(source[p])) for p in range(3)})
    assert [audits[_pair(p)].outcome().status for p in range(3)] == [PartitionStatus.AGREE] * 3
    assert progress.source_bytes == sum(b.size for s in source for b in s) == progress.target_bytes
    assert progress.ended is not None and progress.seconds >= 0


def test_a_partition_that_cannot_be_read_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    source = [batches(5, 10, first_value=100 * p) for p in range(3)]
    target = [mirrored(s) for s in source]
    target[2] = target[2][:2] + target[2][3:]  # a batch missing
    FakeFetcher.starve = {}
    FakeFetcher.errors = {_pair(1).target: OFFSET_OUT_OF_RANGE}
    audits, _ = _audit(monkeypatch, {_pair(p): (source[p], target[p]) for p in range(3)})
    outcomes = [audits[_pair(p)].outcome() for p in range(3)]
    assert [o.status for o in outcomes] == [PartitionStatus.AGREE, PartitionStatus.ERROR,
                                            PartitionStatus.MISMATCH]
    assert "OFFSET_OUT_OF_RANGE" in outcomes[1].notes[-1]
    assert outcomes[2].mismatch is not None and outcomes[2].mismatch.kind is MismatchKind.MISSING


def test_a_partition_the_broker_never_serves_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    source = batches(3, 10)
    monkeypatch.setattr(driver, "RawFetcher", FakeFetcher)
    FakeFetcher.starve, FakeFetcher.errors = {}, {}
    # the target's end was read as 30, but it serves nothing past offset 10 (e.g. a leader that lost
    # data): given up on after STUCK_FETCHES fetches, with what was compared so far
    FakeFetcher.logs = {_pair(0).source: source, _pair(0).target: mirrored(source)[:1]}
    book = AnchorBook(0, 0)
    book.add_sync(0, 0)
    audit = PartitionAudit(Ends(0, 30, 0, 30), book)
    clients: Any = SimpleNamespace(source=None, target=None,
                                   settings=SimpleNamespace(fetcher=SimpleNamespace(isolation_level=1)))
    asyncio.run(driver.compare(clients, {_pair(0): audit}))
    out = audit.outcome()
    assert out.status is PartitionStatus.ERROR and out.target is not None and out.target.end == 10
    assert f"{driver.STUCK_FETCHES} fetches at offset 10 brought nothing" in out.notes[-1]


class FakeClient:
    """A cluster of one-partition topics held in memory (metadata and list_offsets only)."""

    def __init__(self, topics: dict[str, list[RecordBatch]]) -> None:
        self.topics = topics

    async def refresh_metadata(self, _topics: object) -> None:
        return None

    def partitions_for(self, topic: str) -> list[int]:
        return [0] if topic in self.topics else []

    async def list_offsets(self, tps: list[TopicPartition], timestamp: int, **_: object) -> dict[
            TopicPartition, int]:
        from mm2py.client.cluster import EARLIEST

        return {tp: 0 if timestamp == EARLIEST else end_of(self.topics[tp.topic]) for tp in tps}


def _topic(records: list[tuple[bytes | None, bytes | None]]) -> list[RecordBatch]:
    from mm2py.protocol.record_codec import Record, build_batch

    """``records`` as batches of three, from offset 0."""
    return [RecordBatch(build_batch([Record(d, 0, k, v) for d, (k, v) in enumerate(records[i:i + 3])],
                                    base_offset=i, base_timestamp=0)) for i in range(0, len(records), 3)]


def test_anchors_are_read_from_the_offset_syncs_and_progress_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    from mm2py.config.models import MirrorMakerConfig
    from mm2py.operations.audit import reads
    from mm2py.operations.audit.scope import Clients
    from mm2py.protocol.connect_offsets import encode_key, encode_value
    from mm2py.protocol.mm2_records import OffsetSync

    flow = MirrorMakerConfig.from_mapping({"clusters": {"east": "h:1", "west": "h:2"},
                                           "flows": {"east->west": {}}}).flow("east", "west")
    tp, other = TopicPartition("orders", 0), TopicPartition("orders", 1)
    syncs = [OffsetSync(tp, 0, 0), OffsetSync(other, 5, 5), OffsetSync(tp, 100, 100),
             OffsetSync(tp, 250, 200)]
    source = FakeClient({"mm2-offset-syncs.west.internal": _topic(
        [(s.key_bytes(), s.value_bytes()) for s in syncs] + [(b"junk", b"x")])})
    target = FakeClient({"mm2-offsets.east.internal": _topic([
        (encode_key("east", tp), encode_value(49, 50)),  # next 50 at target 50
        (encode_key("east", tp), encode_value(299)),  # MM2's: no target offset
        (encode_key("east", tp, "other-flow"), encode_value(9, 9)),  # another flow's
        (encode_key("east", tp), None)])})  # forgotten
    FakeFetcher.logs = {TopicPartition(t, 0): bs for c in (source, target) for t, bs in c.topics.items()}
    FakeFetcher.starve, FakeFetcher.errors = {}, {}
    monkeypatch.setattr(reads, "RawFetcher", FakeFetcher)
    books = {tp: AnchorBook(220, 0)}  # the source's log starts at 220
    clients: Any = Clients(flow, SimpleNamespace(), source, target)  # type: ignore[arg-type]
    counts = asyncio.run(reads.read_anchors(clients, books))
    assert (counts.syncs, counts.positions, counts.malformed) == (3, 1, 1)
    assert books[tp].syncs == [(0, 0), (100, 100), (200, 250)]
    assert books[tp].deleted() == [(OffsetRange(200, 220), 200)]
    assert books[tp].start() == Anchor(200, 250)  # the position (50 -> 50) is below the log start
