"""What a submission of batches came to: each partition's acknowledged prefix, and its failure.

The producer re-sends a partition's unacknowledged batches itself (see the pipeline's
``RE-SEND``); a caller sees a failure only once the producer gave up on a partition, and then
only as an acknowledged prefix (base offsets up to the first batch that failed) and the failure:
its cause and whether batches past the prefix may be on the broker (``in_doubt``), which only
reading the partition can tell.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from mm2py.client.errors import ClientError
from mm2py.protocol.types import TopicPartition

__all__ = ["Acknowledged", "LaneStoppedError", "PartitionFailure", "Submission", "acknowledged_prefix"]


class LaneStoppedError(ClientError):
    """Not appended (or not known to be): the producer gave up on an earlier batch of the partition
    and the caller has not yet acknowledged that failure (the pipeline's ``STOPPED``)."""


@dataclass(frozen=True)
class PartitionFailure:
    """Why a partition's batches stopped at its acknowledged prefix."""

    cause: BaseException
    #: batches past the acknowledged prefix may be on the broker (their answer was lost, or they
    #: were sent again after such a loss): what the partition holds must be read from it
    in_doubt: bool


@dataclass(frozen=True)
class Acknowledged:
    """A submission's outcome: ``offsets[i]`` is batch i's base offset, -1 from its partition's
    first failure on (a prefix per partition); ``failures`` has each failed partition's failure."""

    offsets: list[int]
    failures: dict[TopicPartition, PartitionFailure]

    @property
    def cause(self) -> BaseException | None:
        """The first failure's cause, a broker's or connection's error before "lane stopped" (which
        only says that an earlier submission failed); None when everything was acknowledged."""
        causes = [f.cause for f in self.failures.values()]
        own = [c for c in causes if not isinstance(c, LaneStoppedError)]
        return next(iter(own or causes), None)

    @property
    def in_doubt(self) -> bool:
        """Whether a failed partition may hold batches past its acknowledged prefix."""
        return any(f.in_doubt for f in self.failures.values())


class Submission:
    """Batches handed to the producer: a future per batch (iterate, index), in input order, and
    once all are answered (:meth:`done`) what they came to (:meth:`result`)."""

    def __init__(
        self, partitions: Sequence[TopicPartition], futures: Sequence[asyncio.Future[int]],
        in_doubt: Callable[[TopicPartition], bool],
    ) -> None:
        self._partitions = list(partitions)
        self._futures = list(futures)
        self._in_doubt = in_doubt
        self._answered: asyncio.Future[list[int | BaseException]] = asyncio.gather(
            *self._futures, return_exceptions=True
        )
        self._result: Acknowledged | None = None
        self._answered.add_done_callback(self._settle)

    def __iter__(self) -> Iterator[asyncio.Future[int]]:
        return iter(self._futures)

    def __len__(self) -> int:
        return len(self._futures)

    def __getitem__(self, i: int) -> asyncio.Future[int]:
        return self._futures[i]

    def done(self) -> bool:
        return self._answered.done()

    async def wait(self) -> None:
        """Until every batch is answered (cancelling the wait does not cancel the batches)."""
        await asyncio.shield(self._answered)

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        self._answered.add_done_callback(lambda _answered: fn())

    def result(self) -> Acknowledged:
        """What was acknowledged and what failed, once :meth:`done` (the same on every call)."""
        if self._result is None:
            self._settle(self._answered)
        assert self._result is not None
        return self._result

    def _settle(self, answered: asyncio.Future[list[int | BaseException]]) -> None:
        # read when the last batch is answered: a failed partition's lane is stopped then, and
        # stays so until the caller, having seen this, lets it send again
        if self._result is None:
            offsets, failed = acknowledged_prefix(self._partitions, answered.result())
            self._result = Acknowledged(offsets, {
                tp: PartitionFailure(cause, self._in_doubt(tp)) for tp, cause in failed.items()
            })


def acknowledged_prefix(
    partitions: Sequence[TopicPartition], outcomes: Sequence[int | BaseException]
) -> tuple[list[int], dict[TopicPartition, BaseException]]:
    """The submitted batches' outcomes (``partitions[i]`` is batch i's) as what the caller may
    count: each partition's acknowledged prefix (base offsets, -1 from its first failure on) and
    each failed partition's first failure."""
    offsets = [-1] * len(outcomes)
    failed: dict[TopicPartition, BaseException] = {}
    for i, (tp, out) in enumerate(zip(partitions, outcomes, strict=True)):
        if isinstance(out, BaseException):
            failed.setdefault(tp, out)
        elif tp not in failed:
            offsets[i] = out
    return offsets, failed
