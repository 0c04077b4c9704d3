"""The contract between a mirror task and its parts: work description, source, sink, progress keeper.

Plain data (:class:`TaskSpec`, :class:`Polled`, :class:`Delivered`) and protocols implemented by
``connectors/`` (:class:`BatchSource`, :class:`BatchSink`) and by the progress/offset-sync writers
(:class:`ProgressKeeper`). :mod:`mm2py.engine.task` runs the pipeline over them.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

from mm2py.engine.latency import PartitionTimes
from mm2py.errors import Mm2pyError
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.errors_codes import BrokerError
from mm2py.protocol.mm2_records import OffsetSync
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

if TYPE_CHECKING:
    from mm2py.config.models import FlowConfig


class TaskState(enum.StrEnum):
    """The state of a task (also of a flow and of its checkpoint connector), as status shows it."""

    UNASSIGNED = "UNASSIGNED"  # created, not started (or, on Spark, holding no partitions)
    RUNNING = "RUNNING"
    FAILED = "FAILED"  # stopped by an error; ``trace`` says which
    PAUSED = "PAUSED"  # a flow halted by the REST API until resumed (KIP-875 keeps STOPPED apart)
    STOPPED = "STOPPED"


#: a flow (or connector) kept with its tasks shut down until resumed: Kafka Connect's target states,
#: KIP-875's STOPPED (a ``str`` of either is found in it too: the states are a ``StrEnum``)
HALTED_STATES = frozenset({TaskState.PAUSED, TaskState.STOPPED})


@dataclass(frozen=True)
class TaskSpec:
    """Everything a runtime needs to start one task, as picklable data."""

    flow: FlowConfig
    task_id: int
    partitions: tuple[TopicPartition, ...]
    start_positions: Mapping[TopicPartition, int] | None = None


@dataclass
class Polled:
    """What one fetch returned for one source partition."""

    batches: list[RecordBatch]
    next_offset: int  # where the next fetch starts (past filtered batches too)
    high_watermark: int = -1
    reset_to: int | None = None  # position moved by the source (e.g. retention): lost offsets
    #: with ``reset_to``: the topic was deleted and created again (its topic id changed), and
    #: ``reset_to`` is where the new one starts
    recreated: bool = False
    #: the source topic's id (``connect_offsets.topic_id_text``) the batches come from, when known:
    #: stored with the partition's position
    topic_id: str | None = None
    #: the position this fetch was made from, when known; then every batch ends past it (the
    #: fetcher drops whole batches below it and crops the first), which the task relies on
    fetch_offset: int | None = None


@dataclass(frozen=True)
class Delivered:
    """One target batch acknowledged by the target: one source batch, or a run of them merged
    (coalescing), covering source offsets ``source_first``..``source_last``."""

    source: TopicPartition
    source_first: int
    source_last: int
    source_next: int
    target_first: int
    record_offsets: Sequence[int] | None = None  # when the batch was rebuilt (compaction gaps)
    size: int = 0
    records: int = 0
    #: maxTimestamp of the batch the target acknowledged (a merged batch's: its newest record),
    #: -1 when unknown (replication latency is measured from it)
    max_timestamp: int = -1
    #: one of the pieces a source batch too large for the target was split into
    split: bool = False


@dataclass(frozen=True)
class RefusedRecord:
    """A record of source partition ``source`` the target refuses even alone: a batch of it alone is
    ``size`` bytes, over target topic ``topic``'s ``limit`` (its ``max.message.bytes``)."""

    source: TopicPartition
    topic: str
    offset: int
    size: int
    limit: int


#: how long a task's start asks for a new partition's offsets before leaving it for a later
#: attempt (a just-created partition whose leader is not ready must not hold up the others: the
#: ready ones wait this long for it). 5 s held a Spark lease's 348 ready partitions of 500 that
#: long behind 152 target partitions created seconds before (2,000 on a busy broker), 5 of the 7 s
#: from its GO to its first batch; the deferred ones are asked again 0.2 s later (StartRetry)
START_LOOKUP_SECONDS = 1.0


class BatchSource(Protocol):
    async def resolve_start(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Start offsets for partitions with no stored progress; a partition that cannot be
        resolved now (no leader yet) is left out, and the task asks again later."""
        ...

    def expect_topic_ids(self, topic_ids: Mapping[str, str]) -> None:
        """The source topic ids the positions of newly assigned partitions were stored with: a topic
        whose id is now another one (deleted and created again while no task mirrored it) is
        reported at the next poll as re-created (``Polled.recreated``)."""
        ...

    async def poll(self, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, Polled]: ...

    async def close(self) -> None: ...


class PendingPut(Protocol):
    """A put handed to the sink: what its batches came to, once every one is answered (the sink
    re-sends what it must by itself: a put is answered only once it is acknowledged or given up)."""

    def done(self) -> bool:
        """Every batch is answered (acknowledged or failed)."""
        ...

    async def wait(self) -> None:
        """Until :meth:`done` (cancelling the wait does not cancel the put)."""
        ...

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` (on the event loop) once :meth:`done`; soon, if it is already."""
        ...

    def result(self) -> list[Delivered]:
        """What was acknowledged, in order per partition (a prefix of each partition's batches);
        raises :class:`SinkError` carrying it when not everything was. The same on every call."""
        ...


class BatchSink(Protocol):
    def submit(self, batches: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> PendingPut:
        """Start producing, in order per partition, and return at once. Puts submitted later keep
        the order after this one; once a put fails, the failed partitions' batches of later puts
        fail too (nothing of them is appended), until :meth:`recover`."""
        ...

    def recover(self) -> None:
        """The caller has seen a failed put and every put after it: failed partitions may be
        produced again (from what was acknowledged)."""
        ...

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Where the next batch of each source partition would land on the target (its end); a
        partition whose target cannot be asked now (a just-created one whose leader is not ready)
        is left out, and the task asks again later."""
        ...

    async def close(self) -> None: ...


class PutTask:
    """A :class:`PendingPut` for a sink whose put is one coroutine (puts run as tasks, in order)."""

    def __init__(self, put: Coroutine[Any, Any, list[Delivered]]) -> None:
        self._task = asyncio.ensure_future(put)

    def done(self) -> bool:
        return self._task.done()

    async def wait(self) -> None:
        await asyncio.wait({self._task})

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        self._task.add_done_callback(lambda _task: fn())

    def result(self) -> list[Delivered]:
        return self._task.result()


#: a log record's attribute (``extra``) naming what it is about beyond its template and first
#: argument: the log throttle (``runtime/log_throttle.py``) folds repeats of one such kind only
THROTTLE_KEY = "throttle_key"


class TaskError(Mm2pyError):
    """A mirror task cannot go on; the task is marked FAILED with this as its trace."""


class SinkError(TaskError):
    """Producing to the target failed (the sink gave up re-sending); ``delivered`` is what was
    acknowledged before the failure, a prefix per partition. Without ``restart`` the target holds
    exactly that prefix, and the task fetches again from there. ``restart``: it may hold more
    (what it holds must be read from it), so the task fails and is started again from its
    committed progress, which resumes exactly from the target's tail. ``refused``: records the
    target refuses even alone, each holding its partition right before it (nothing of the
    partition after it was produced)."""

    def __init__(self, message: str, delivered: list[Delivered], *, restart: bool = False,
                 refused: Sequence[RefusedRecord] = (), partitions: Sequence[TopicPartition] = (),
                 causes: Mapping[TopicPartition, tuple[TopicPartition, BaseException]] | None = None) -> None:
        """``partitions``: the target partitions that failed (those ``refused`` held too);
        ``causes``: each failed source partition's target partition and the failure's cause."""
        super().__init__(message)
        self.delivered = delivered
        self.restart = restart
        self.refused = list(refused)
        self.partitions = tuple(partitions)
        self.causes = dict(causes or {})

    @property
    def kind(self) -> str:
        """What failed where, for telling one failure from another in the log (the log throttle
        folds repeats of one kind only): the cause — a broker's error by its name, another error by
        its type — and the failed partitions; not the message, which changes from retry to retry."""
        cause = self.__cause__
        name = (cause.info.name if isinstance(cause, BrokerError) else type(cause).__name__
                if cause is not None else "held" if self.refused or not self.partitions else "failed")
        return f"{name} on {', '.join(sorted(str(tp) for tp in self.partitions)) or 'no partition named'}"


class ProgressKeeper(Protocol):
    """Persists positions and offset syncs (blocking calls, run in a thread)."""

    def load(self) -> dict[TopicPartition, Position]: ...

    def commit(self, positions: Mapping[TopicPartition, Position]) -> None:
        """Persist ``positions``: every partition (a forced commit) or those that moved since the
        last periodic one; partitions left out keep what was persisted for them."""

    def send_syncs(self, syncs: Sequence[OffsetSync]) -> None: ...

    def flush_syncs(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class TaskMetrics:
    batches: int = 0
    records: int = 0
    bytes: int = 0
    rebuilt_batches: int = 0
    #: batches produced as pieces of a source batch too large for the target topic
    split_batches: int = 0
    sink_failures: int = 0
    offsets_lost_to_retention: int = 0
    syncs: int = 0
    commits: int = 0
    commit_failures: int = 0
    skipped_on_resume: int = 0
    restarts: int = 0  # the task failed and was started again from its committed progress
    #: batches the target wrote exactly where the last one ended; alarms (engine/losses.py)
    audit_verified_batches: int = 0
    audit_source_deleted: int = 0
    audit_source_truncated: int = 0
    audit_source_recreated: int = 0
    audit_target_truncated: int = 0
    audit_foreign_records: int = 0
    audit_records_too_large: int = 0
    #: time the target's brokers asked the task's producer to wait under a quota (throttle_time_ms)
    target_throttle_ms: int = 0
    lag: dict[TopicPartition, int] = field(default_factory=dict)
    #: replication latency, record age and lag in time per partition (see engine.latency)
    times: dict[TopicPartition, PartitionTimes] = field(default_factory=dict)


#: TaskMetrics' counters (they only grow; lag and times are per-partition figures)
TASK_COUNTERS: tuple[str, ...] = tuple(f.name for f in fields(TaskMetrics) if isinstance(f.default, int))
#: the counters a task counts where it runs (restarts are counted by whoever restarts it: the
#: in-process flow runner, or the Spark driver for failed leases and rounds)
RUN_COUNTERS: tuple[str, ...] = tuple(n for n in TASK_COUNTERS if n != "restarts")


#: Given a partition's stored position (source next, target end at that time) and the target
#: partition's end now when the task's start read it with the others' (None: the reconciler asks),
#: returns the position to resume from after skipping batches that already reached the target,
#: and those batches (so their offset syncs are written as if they had just been delivered).
Reconciler = Callable[[TopicPartition, Position, int | None], Awaitable[tuple[Position, list[Delivered]]]]
