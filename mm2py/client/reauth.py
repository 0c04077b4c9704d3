"""KIP-368 re-authentication of one broker connection, and the process's session counts.

A broker with ``connections.max.reauth.ms`` (or an OAUTHBEARER token that expires) announces a
session lifetime in its last SaslAuthenticate answer and closes the connection at the first
request it reads after that lifetime. :class:`SessionKeeper` re-authenticates before then, as the
Java client does: at a random point between 85% and 95% of the lifetime, but at least a second
before its end (``reauthentication_delay``), it sends SaslHandshake and SaslAuthenticate again on
the same connection (for OAUTHBEARER with a token that has at least half its lifetime left, so
sessions do not shrink with the token's). Requests already sent stay in flight: the broker reads
one request of a connection at a time, so it answers them before it reads the handshake (hence
the second: one may wait behind a long-polling fetch). Requests made while the exchange runs wait
for its end, then go out (the broker would read them as SASL messages). A refused
re-authentication closes the connection with the broker's reason.

:data:`SASL_SESSIONS` counts, per cluster name, the re-authentications of the process's
connections, the failed ones, and the connections the broker closed after their session had ended
(which re-authentication exists to prevent); ``/metrics`` exports them.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from mm2py.client.errors import ConnectionLostError
from mm2py.errors import SecurityError
from mm2py.protocol.sasl_mechanisms import reauthentication_delay

log = logging.getLogger(__name__)


@dataclass
class SessionCounts:
    """One cluster's SASL session figures (this process's connections)."""

    reauthentications: int = 0
    reauthentication_failures: int = 0
    #: connections the broker closed after the session lifetime it announced had passed
    expired_closes: int = 0


class _Sessions:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # several event loops (threads) may count at once
        self._counts: dict[str, SessionCounts] = {}

    def add(self, cluster: str, name: str) -> None:
        with self._lock:
            counts = self._counts.setdefault(cluster, SessionCounts())
            setattr(counts, name, getattr(counts, name) + 1)

    def snapshot(self) -> dict[str, SessionCounts]:
        with self._lock:
            return {k: SessionCounts(**vars(v)) for k, v in self._counts.items()}


#: per cluster name (``SecurityConfig.name``; "" when unnamed)
SASL_SESSIONS = _Sessions()


class SessionKeeper:
    """Re-authenticates one connection before each session it gets ends."""

    def __init__(self, what: str, cluster: str, authenticate: Callable[[], Awaitable[int | None]],
                 fail: Callable[[BaseException], None]) -> None:
        self._what, self.cluster = what, cluster
        self._authenticate, self._fail = authenticate, fail
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._gate: asyncio.Future[None] | None = None
        #: the last request waiting for its turn (IN-ORDER): set once it may go, so the next may
        self._last: asyncio.Future[None] | None = None
        self._waiting = 0  # requests waiting for their turn
        #: when the current session ends (event loop time), None without a session lifetime
        self.session_end: float | None = None

    def started(self, lifetime_ms: int | None, since: float) -> None:
        """A (re-)authentication that began at ``since`` (event loop time) succeeded with this
        session lifetime (0 or None: no limit).

        The broker's session starts when it reads our last SaslAuthenticate, after ``since`` and
        before its answer reached us: counted from ``since``, our session ends no later than the
        broker's (counted from the answer, a busy process would re-authenticate too late by the
        time it took to read that answer)."""
        if not lifetime_ms or lifetime_ms <= 0:
            self.session_end = None
            return
        loop = asyncio.get_running_loop()
        self.session_end = since + lifetime_ms / 1000
        at = since + reauthentication_delay(lifetime_ms, random.random())
        log.debug("%s: SASL session of %d ms, re-authenticating in %.1f s", self._what, lifetime_ms,
                  at - loop.time())
        self._timer = loop.call_at(at, self._begin)

    def _begin(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        self._gate = loop.create_future()
        self._task = loop.create_task(self._run())

    async def _run(self) -> None:
        since = asyncio.get_running_loop().time()
        try:
            lifetime = await self._authenticate()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            SASL_SESSIONS.add(self.cluster, "reauthentication_failures")
            log.warning("%s: re-authentication failed, closing the connection: %s", self._what, e)
            self._fail(e if isinstance(e, SecurityError | ConnectionLostError) else
                       ConnectionLostError(f"{self._what}: re-authentication failed: {e!r}"))
        else:
            SASL_SESSIONS.add(self.cluster, "reauthentications")
            self.started(lifetime, since)
        finally:
            self._task = None
            self._open_gate()

    def _open_gate(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None and not gate.done():
            gate.set_result(None)

    async def wait(self) -> None:
        """Return once no re-authentication is running (at once from the re-authentication itself),
        and after every request that waited before this one (IN-ORDER: a caller writes its request
        as soon as this returns, so requests leave in the order they were made; a request made just
        as the gate opens would otherwise overtake those still waking up behind it, and a broker
        refuses a produce batch that arrives before the one before it as if it forgot our
        producer)."""
        if asyncio.current_task() is self._task or (self._gate is None and not self._waiting):
            return
        before, mine = self._last, asyncio.get_running_loop().create_future()
        self._last = mine
        self._waiting += 1
        try:
            if before is not None:
                await asyncio.shield(before)
            while self._gate is not None:  # (another re-authentication may have begun meanwhile)
                await asyncio.shield(self._gate)
        finally:
            self._waiting -= 1
            if self._last is mine:
                self._last = None
            if before is None or before.done():
                _release(mine)
            else:  # cancelled while waiting: the next goes only after the one before us
                before.add_done_callback(lambda _: _release(mine))

    def lost(self, *, by_client: bool) -> None:
        """The connection is gone: stop; count a broker's close after the session ended."""
        end = self.session_end
        if not by_client and end is not None and asyncio.get_running_loop().time() >= end:
            SASL_SESSIONS.add(self.cluster, "expired_closes")
            log.warning("%s: the broker closed the connection after its SASL session ended", self._what)
        self.session_end = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self._open_gate()


def _release(turn: asyncio.Future[None]) -> None:
    if not turn.done():
        turn.set_result(None)
