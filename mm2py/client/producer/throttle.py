"""The target's quota throttling (KIP-219), as the producer honours it.

A Produce answer's ``throttle_time_ms`` says the broker is over a client quota for us
(``producer_byte_rate`` or ``request_percentage`` of our client id or principal) and has muted the
connection for that long. :class:`Throttles` keeps, per broker, when that ends; the pipeline sends
nothing to a throttled broker before then (``THROTTLED``) and the time is counted, so the task can
show that it waits for the target rather than fails. Bookkeeping only, no I/O.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["Throttle", "Throttles"]

#: a broker's throttle is still shown this long after it ended (a quota throttles in bursts)
SHOWN_FOR_S = 10.0


@dataclass
class Throttle:
    """One broker's throttling of our produce requests."""

    broker: int
    until: float = 0.0  # monotonic: nothing is sent to the broker before
    last_ms: int = 0  # the latest throttle time it asked for
    total_ms: int = 0  # every throttle time it asked for


@dataclass
class Throttles:
    """Per broker, when its throttle ends and how long it throttled us in all."""

    #: THROTTLED: brokers whose throttle has not ended (pruned as they end: empty when none is)
    blocking: dict[int, float] = field(default_factory=dict)
    by_broker: dict[int, Throttle] = field(default_factory=dict)
    total_ms: int = 0

    def note(self, broker: int, throttle_ms: int, now: float | None = None) -> float:
        """A Produce answer of ``broker`` asked for ``throttle_ms``: the seconds to wait."""
        now = time.monotonic() if now is None else now
        t = self.by_broker.get(broker)
        if t is None:
            t = self.by_broker[broker] = Throttle(broker)
        t.until = max(t.until, now + throttle_ms / 1000)
        t.last_ms = throttle_ms
        t.total_ms += throttle_ms
        self.total_ms += throttle_ms
        self.blocking[broker] = t.until
        return throttle_ms / 1000

    def blocked(self, broker: int, now: float | None = None) -> bool:
        """THROTTLED: whether nothing may be sent to ``broker`` now."""
        until = self.blocking.get(broker)
        if until is None:
            return False
        if until > (time.monotonic() if now is None else now):
            return True
        del self.blocking[broker]
        return False

    def recent(self, now: float | None = None) -> list[Throttle]:
        """The brokers throttling us now or until :data:`SHOWN_FOR_S` ago."""
        now = time.monotonic() if now is None else now
        return [t for t in self.by_broker.values() if t.until > now - SHOWN_FOR_S]
