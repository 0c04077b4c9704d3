"""A task's source, sink and progress store in memory, over real batch bytes (no broker): the
parts the TaskRunner tests plug in."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from mm2py.engine.task_contract import Delivered, Polled, PutTask, SinkError
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.errors import CorruptBatchError
from mm2py.protocol.mm2_records import OffsetSync
from mm2py.protocol.record_codec import Record, build_batch
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

TP = TopicPartition("orders", 0)


def batch(base: int, n: int) -> RecordBatch:
    return RecordBatch(build_batch([Record(i, i, b"k", f"v{base + i}".encode()) for i in range(n)],
                                   base_offset=base, base_timestamp=1_000))


class Log:
    """A source partition: batches, and offsets that a read_committed fetch skips (markers)."""

    def __init__(self, batches: list[RecordBatch], end: int) -> None:
        self.batches, self.end = batches, end


class MemorySource:
    def __init__(
        self, logs: Mapping[TopicPartition, Log], corrupt_at: int | None = None, per_fetch: int = 2
    ) -> None:
        self.logs = logs
        self.corrupt_at = corrupt_at
        self.per_fetch = per_fetch
        self.polls = 0
        #: the topic ids the task said its stored positions were written with
        self.expected: dict[str, str] = {}

    async def resolve_start(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: 0 for tp in partitions}

    def expect_topic_ids(self, topic_ids: Mapping[str, str]) -> None:
        self.expected.update(topic_ids)

    async def poll(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, Polled]:
        self.polls += 1
        await asyncio.sleep(0)
        out = {}
        for tp, pos in positions.items():
            log = self.logs[tp]
            got = [b for b in log.batches if b.next_offset > pos][: self.per_fetch]
            if any(b.base_offset <= (self.corrupt_at or -1) <= b.last_offset for b in got):
                raise CorruptBatchError(f"bad CRC at {self.corrupt_at}")
            nxt = got[-1].next_offset if got else log.end
            if got and got[-1] is log.batches[-1]:
                nxt = log.end  # the filtered stretch after the last batch
            out[tp] = Polled(got, max(nxt, pos), log.end, fetch_offset=pos)
        return out

    async def close(self) -> None:
        return None


class MemorySink:
    def __init__(self, fail_on_put: set[int] | None = None, restart: bool = False) -> None:
        self.target: dict[TopicPartition, list[bytes]] = {}
        self.puts = 0
        self.fail_on_put = fail_on_put or set()
        self.restart = restart  # the failures say: retrying in place cannot be made safe

    async def put(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> list[Delivered]:
        self.puts += 1
        delivered: list[Delivered] = []
        for tp, batches in work:
            for i, b in enumerate(batches):
                if self.puts in self.fail_on_put and i == 1:
                    raise SinkError("broker went away", delivered, restart=self.restart)
                log = self.target.setdefault(tp, [])
                base = sum(RecordBatch(x).records_count for x in log)
                log.append(bytes(b))
                delivered.append(Delivered(tp, b.base_offset, b.last_offset, b.next_offset, base,
                                           None, b.size, b.records_count, b.max_timestamp))
        return delivered

    def submit(self, work: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> PutTask:
        return PutTask(self.put(work))

    def recover(self) -> None:
        return None

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: sum(RecordBatch(x).records_count for x in self.target.get(tp, [])) for tp in partitions}

    async def close(self) -> None:
        return None


class MemoryProgress:
    def __init__(self, stored: dict[TopicPartition, Position] | None = None) -> None:
        self.stored = dict(stored or {})
        self.syncs: list[OffsetSync] = []
        self.commits = 0

    def load(self) -> dict[TopicPartition, Position]:
        return dict(self.stored)

    def commit(self, positions: Mapping[TopicPartition, Position]) -> None:
        self.commits += 1
        self.stored.update(positions)

    def send_syncs(self, syncs: Sequence[OffsetSync]) -> None:
        self.syncs.extend(syncs)

    def flush_syncs(self) -> None:
        return None

    def close(self) -> None:
        return None


def values(sink: MemorySink, tp: TopicPartition = TP) -> list[bytes]:
    from mm2py.protocol.record_codec import decode_records

    return [r.value or b"" for raw in sink.target.get(tp, []) for r in decode_records(RecordBatch(raw))]
