"""The one back-off of mm2py: how long to wait before trying again, and when to give up.

Every retry loop of the product — the raw client's calls and produce lanes, fetches, admin calls,
a partition the target refuses, a deferred start, a failed task's restart — asks a
:class:`Backoff` for its delays instead of doubling a number of its own. It is pure: no clock, no
sleep; a caller hands it the time when it needs to know whether it has run out of it.

Two shapes, each caller's numbers kept:

- **doubling** (``factor`` 2, the default): ``first``, then each delay ``factor`` times the one
  before, at most ``maximum`` (``first`` itself is waited even if above ``maximum``);
- **linear** (``linear=True``): ``first``, ``2·first``, ``3·first`` ... at most ``maximum``.

With a ``timeout``, the back-off has run out ``timeout`` seconds after :attr:`since` (the first
failure of the trouble, or when the calls began).
"""

from __future__ import annotations

import math

__all__ = ["Backoff"]


class Backoff:
    """Delays before the attempts after failed ones (module doc): :meth:`next_delay` for a caller
    that keeps the count here, :meth:`delay` for one that counts failures itself."""

    def __init__(
        self, first: float, maximum: float = math.inf, *, factor: float = 2.0, linear: bool = False,
        timeout: float | None = None, since: float | None = None,
    ) -> None:
        #: the first delay
        self.first = first
        #: no later delay is longer (the first may be)
        self.maximum = maximum
        #: each delay is this times the one before (doubling)
        self.factor = factor
        #: True: the n-th delay is n times the first instead
        self.linear = linear
        #: how long the trouble may last (None: for ever); measured from :attr:`since`
        self.timeout = timeout
        #: when the trouble began (None: not begun; :meth:`expired` is False)
        self.since = since
        #: delays handed out by :meth:`next_delay` since the last :meth:`reset`
        self.attempts = 0

    def delay(self, attempt: int) -> float:
        """The delay after ``attempt`` delays already waited (0: the first delay)."""
        if self.linear:
            return min(self.maximum, self.first * (attempt + 1))
        delay = self.first
        for _ in range(attempt):  # as each delay grows from the one before: at most ``maximum``
            longer = min(delay * self.factor, self.maximum)
            if longer == delay:
                break
            delay = longer
        return delay

    def next_delay(self) -> float:
        """The next delay to wait (counted)."""
        delay = self.delay(self.attempts)
        self.attempts += 1
        return delay

    def reset(self, since: float | None = None) -> None:
        """The calls succeeded (or a new trouble begins at ``since``): the next delay is the first."""
        self.attempts = 0
        self.since = since

    def left(self, now: float) -> float:
        """Seconds left before the back-off runs out (infinite without a time-out or a start)."""
        if self.timeout is None or self.since is None:
            return math.inf
        return self.since + self.timeout - now

    def expired(self, now: float) -> bool:
        """True once ``timeout`` seconds have passed since :attr:`since`."""
        if self.timeout is None or self.since is None:
            return False
        return now >= self.since + self.timeout
