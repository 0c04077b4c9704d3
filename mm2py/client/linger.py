"""How long a fetch loop waits before its next request (pure): when traffic trickles
(:class:`Linger`), and after a fetch that failed (:data:`UNAVAILABLE_BACKOFF`,
:data:`CORRUPT_BACKOFF`; the task's source and the fetch hub wait alike)."""

from __future__ import annotations

from dataclasses import dataclass

from mm2py.retry import Backoff

__all__ = ["CORRUPT_BACKOFF", "UNAVAILABLE_BACKOFF", "Linger"]

#: a fetch failed beyond the client's own retries (the broker unreachable or leaderless): 0.5 s
#: more for each such failure in a row, at most 5 s (asked through ``delay``: it counts nothing)
UNAVAILABLE_BACKOFF = Backoff(0.5, 5.0, linear=True)
#: a fetch brought a corrupt batch: 0.2 s more for each attempt in a row (``delay`` only)
CORRUPT_BACKOFF = Backoff(0.2, linear=True)


@dataclass(frozen=True)
class Linger:
    """``mm2py.fetch.linger.*``: a fetch that brought fewer than ``bytes`` makes the next one wait
    ``seconds``, or ``per_partition`` seconds for each partition fetched if that is longer: trickling
    traffic moves in fewer, fuller requests. The per-partition part bounds the source broker's
    work, which reads every partition of a fetch session for each fetch, data or not (at 2,000
    partitions and the default 25 µs: at most twenty such reads of all of them a second)."""

    seconds: float = 0.0
    bytes: int = 0
    per_partition: float = 0.0
    #: the per-partition part counts at least this many (a process pacing as one holding more)
    min_partitions: int = 0

    def delay(self, partitions: int) -> float:
        return max(self.seconds, self.per_partition * max(partitions, self.min_partitions))
