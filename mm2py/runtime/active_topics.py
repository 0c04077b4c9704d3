"""The topics each flow has written to on its target since it was created or last reset (KIP-558).

Kafka Connect records a connector's *active topics* when one of its tasks first produces to a
topic, keeps them in its status topic and lists them at ``GET /connectors/{name}/topics``. mm2py
does the same per flow: a flow runner tells :class:`ActiveTopics` the source topics of batches
the target acknowledged (once per topic and runner), the registry records their remote names
(``east.orders``: the names the flow writes to, as Connect shows them) and keeps them in the state
file's ``topics`` section, so they survive restarts. A reset forgets them; the next acknowledged
batch of a topic records it again.

:class:`WatchedSink` is how the in-process runtime learns what was acknowledged: it wraps a task's
sink and reads each put's outcome as the task settles it; the Spark driver reads the same from
the per-partition figures its executors report (:func:`acknowledged_topics`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mm2py.engine.task_contract import BatchSink, Delivered, PendingPut, SinkError
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

if TYPE_CHECKING:
    from mm2py.config.models import FlowConfig
    from mm2py.engine.latency import PartitionTimes

__all__ = ["ActiveTopics", "WatchedSink", "acknowledged_topics"]


class ActiveTopics:
    """Each flow's active topics (remote names), kept in ``section`` (a state-file section, saved by
    ``save`` whenever a topic is added or a flow's topics are forgotten)."""

    def __init__(self, section: dict[str, Any], save: Callable[[], None]) -> None:
        self._section = section
        self._save = save

    def topics(self, flow: str) -> list[str]:
        return sorted(self._section.get(flow, ()))

    def record(self, flow: FlowConfig, source_topics: Iterable[str]) -> None:
        """``flow`` had batches of ``source_topics`` acknowledged by its target."""
        policy = flow.replication_policy()
        remote = {policy.format_remote_topic(flow.source, t) for t in source_topics}
        known = self._section.setdefault(flow.name, [])
        new = remote - set(known)
        if new:
            known.extend(sorted(new))
            self._save()

    def reset(self, flow: str, *, save: bool = True) -> None:
        """Forget ``flow``'s topics; ``save=False``: the caller writes the state file itself."""
        if self._section.pop(flow, None) is not None and save:
            self._save()


def acknowledged_topics(times: Mapping[TopicPartition, PartitionTimes]) -> set[str]:
    """The source topics of partitions with batches the target acknowledged, as a task's latency
    figures show them (every acknowledged batch with a timestamp is measured)."""
    return {tp.topic for tp, t in times.items() if t.replication.count}


class WatchedSink:
    """A task's :class:`BatchSink` that tells ``acknowledged`` the source topics of what each put
    delivered (read when the task settles the put; a failed put's delivered part included), and
    ``delivered`` (if given) the acknowledged batches themselves, in the task's order."""

    def __init__(self, sink: BatchSink, acknowledged: Callable[[set[str]], None],
                 delivered: Callable[[list[Delivered]], None] | None = None) -> None:
        self.inner = sink
        self._acknowledged = acknowledged
        self._delivered = delivered

    def submit(self, batches: Sequence[tuple[TopicPartition, list[RecordBatch]]]) -> PendingPut:
        return _WatchedPut(self.inner.submit(batches), self._acknowledged, self._delivered)

    def recover(self) -> None:
        self.inner.recover()

    @property
    def throttles(self) -> object:
        """The inner sink's quota throttling (THROTTLED), for the task's ``waiting_for_target``."""
        return getattr(self.inner, "throttles", None)

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return await self.inner.end_offsets(partitions)

    async def close(self) -> None:
        await self.inner.close()


class _WatchedPut:
    def __init__(self, put: PendingPut, acknowledged: Callable[[set[str]], None],
                 delivered: Callable[[list[Delivered]], None] | None = None) -> None:
        self._put = put
        self._acknowledged = acknowledged
        self._delivered = delivered

    def done(self) -> bool:
        return self._put.done()

    async def wait(self) -> None:
        await self._put.wait()

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        self._put.add_done_callback(fn)

    def result(self) -> list[Delivered]:
        try:
            delivered = self._put.result()
        except SinkError as exc:
            self._tell(exc.delivered)
            raise
        self._tell(delivered)
        return delivered

    def _tell(self, delivered: list[Delivered]) -> None:
        if delivered:
            self._acknowledged({d.source.topic for d in delivered})
            if self._delivered is not None:
                self._delivered(delivered)
