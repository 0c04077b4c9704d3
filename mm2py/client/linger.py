"""How long a fetch loop waits before its next request when traffic trickles (pure)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Linger"]


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

    def delay(self, partitions: int) -> float:
        return max(self.seconds, self.per_partition * partitions)
