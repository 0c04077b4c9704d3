"""What librdkafka told an admin client about its cluster, and the error a call that gave up raises.

librdkafka reports trouble with a cluster through its error callback, not through the call that
waits: a refused TLS handshake or SASL authentication, every broker down, the last broker error.
:class:`ClusterHealth` keeps those for one :class:`~mm2py.rdkafka.admin.ClusterAdmin`, says when a
waiting call should give up before its time-out (refused; unreachable for
``mm2py.unreachable.timeout.ms``; the process stopping), and turns the give-up into one error of
the tree that names the cluster and why.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import KafkaError, KafkaException

from mm2py import interrupts
from mm2py.errors import ClusterUnreachableError, Mm2pyError, SecurityError
from mm2py.rdkafka.reachability import accepts_connections

__all__ = ["BrokerRefusedError", "ClusterHealth", "ClusterSecurityError", "StoreError",
           "admin_calls_interrupted", "interrupt_admin_calls"]


class StoreError(Mm2pyError):
    """A Kafka-backed store could not do what it was asked (a write refused, a read timed out)."""


class ClusterSecurityError(SecurityError):
    """The cluster refused our TLS handshake or SASL authentication (librdkafka's reason; not retried)."""


class BrokerRefusedError(StoreError):
    """The cluster answered and refused the request (e.g. a topic config it does not support)."""


#: librdkafka errors that mean TLS or SASL refused us: retrying does not help
_SECURITY_ERRORS = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL})
#: in an authentication error's text: the connection dropped during the SASL handshake (a busy or
#: restarting broker), so the broker refused nothing and librdkafka connects again; e.g. "SASL
#: OAUTHBEARER mechanism handshake failed: Local: Broker transport failure: broker's supported
#: mechanisms: (n/a)"
_TRANSPORT_FAILURE = "Local: Broker transport failure"
#: set once the process is stopping (SIGINT/SIGTERM): admin calls still waiting give up at once
_INTERRUPTED = threading.Event()


def interrupt_admin_calls() -> None:
    """Make every admin call still waiting for a cluster fail now (the process is stopping)."""
    _INTERRUPTED.set()


def admin_calls_interrupted() -> bool:
    """The process is stopping (told so, or the command got SIGINT or SIGTERM: an admin call in a
    thread must not hold the exit up): a call that failed now may have been cut short."""
    return _INTERRUPTED.is_set() or interrupts.requested()


class ClusterHealth:
    """One admin client's view of its cluster, from librdkafka's error callback (which runs on the
    thread that polls the client) and from its calls' answers."""

    def __init__(self, alias: str, bootstrap: str, timeout: float, unreachable_timeout: float) -> None:
        self.where = f"cluster '{alias}' ({bootstrap})"
        self.bootstrap = bootstrap
        self.timeout = timeout  # a call's own, for the error's words
        #: every broker refusing connections for this long fails a call at once (not after ``timeout``)
        self.unreachable_timeout = unreachable_timeout
        self.down_since: float | None = None  # every broker down since (None: one answered since)
        self.last_refusal = 0.0  # when librdkafka last said a connection failed
        self.refused: str | None = None  # a TLS/SASL refusal reported by librdkafka
        self.last_error: str | None = None

    def on_error(self, err: KafkaError) -> None:
        if err.code() != KafkaError._ALL_BROKERS_DOWN or self.last_error is None:
            self.last_error = err.str()  # keep the broker's own reason over "1/1 brokers are down"
        if err.code() in _SECURITY_ERRORS and _TRANSPORT_FAILURE not in err.str():
            self.refused = err.str()
        if err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            self.last_refusal = time.monotonic()
        if err.code() == KafkaError._ALL_BROKERS_DOWN and self.down_since is None:
            self.down_since = time.monotonic()

    def unreachable(self) -> bool:
        """Every broker has refused us for ``unreachable_timeout``, and still does (reachability.py)."""
        now, since = time.monotonic(), self.down_since
        return (since is not None and now - since >= self.unreachable_timeout
                and (now - self.last_refusal < 2.0 or not accepts_connections(self.bootstrap)))

    def given_up(self, deadline: float) -> bool:
        return (self.refused is not None or self.unreachable() or admin_calls_interrupted()
                or time.monotonic() >= deadline)

    def reached(self) -> None:
        self.down_since = None

    def error(self, what: str, exc: BaseException) -> Mm2pyError:
        """The error for a call (``what``) that failed with ``exc`` or gave up."""
        err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError.SASL_AUTHENTICATION_FAILED:
            return ClusterSecurityError(f"{self.where}: {what} failed: {err.str()}")
        if isinstance(err, KafkaError) and err.code() > 0:
            # a broker answered with an error code: the cluster is reachable, it refused the request
            return BrokerRefusedError(f"{self.where}: {what} refused: {err.str()}")
        if self.refused is not None:
            return ClusterSecurityError(f"{self.where}: {what} failed: {self.refused}")
        reason = str(exc) or f"no answer within {self.timeout:.0f}s"
        if self.unreachable():
            reason = f"every broker refused connections for {self.unreachable_timeout:.0f}s"
        elif admin_calls_interrupted():
            reason = "interrupted: the process is stopping"
        if self.last_error and self.last_error not in reason:
            reason += f" (last broker error: {self.last_error})"
        return ClusterUnreachableError(f"{self.where}: {what} failed: {reason}")
