"""One error tree for everything mm2py raises on purpose.

::

    Mm2pyError
    ├── ConfigError            a key or value is unknown or invalid (also a ValueError); names the key
    ├── ProtocolError          bytes that do not follow the Kafka protocol (mm2py.protocol.errors)
    ├── BrokerError            a broker answered with an error code (mm2py.protocol.errors_codes)
    ├── ClientError            the transport failed: connection lost, timeout, no leader, produce refused
    ├── SecurityError          TLS or SASL refused us: a setting to fix, never retried
    ├── ClusterUnreachableError  a cluster did not answer in time
    ├── StoreError             a Kafka-backed store refused a write (progress, group offsets)
    ├── NoAuthorizerError      a cluster has no authorizer: there are no topic ACLs to read or copy
    ├── TaskError              a mirror task cannot go on (source or sink side)
    ├── LeaseWireError         a line between a Spark lease and its driver that is not a lease message
    ├── SteeringError          a run-time change names no flow, an existing flow, a conflicting cluster
    ├── ConnectError           the Connect facade's own refusal (unknown connector, name taken) and its status
    ├── OffsetResetError       a flow's positions cannot be moved as asked (no such partition, out of range)
    ├── FailoverError          a consumer-group move that cannot be carried out
    ├── TranslationError       an offset that cannot be translated exactly (mm2py.engine.translation)
    ├── AuditError             ``mm2py audit`` cannot read the offset-syncs or progress topic
    ├── UnauthenticatedError   a REST API caller's credentials are missing or wrong (a 401)
    └── HarnessError           the local Kafka harness (``mm2py dev``) cannot do what was asked

Each family lives beside the code that raises it; this module holds the root and the families
that more than one layer raises (configuration, security, reachability). It imports nothing.
"""

from __future__ import annotations

__all__ = ["ClusterUnreachableError", "ConfigError", "Mm2pyError", "SecurityError"]


class Mm2pyError(Exception):
    """Root of the errors mm2py raises on purpose (a bug shows as any other exception)."""


class ConfigError(Mm2pyError, ValueError):
    """A configuration key or value is unknown or invalid. ``key`` names the offending key."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, str | None]]:
        return (type(self), (str(self), self.key))


class SecurityError(Mm2pyError):
    """TLS or SASL refused the connection (unknown CA, wrong password, mechanism not enabled...).

    A setting to fix: never retried, and not an outage (REST answers it 401, not 503)."""

    retriable = False


class ClusterUnreachableError(Mm2pyError):
    """A cluster did not answer within the timeout (refused connections, no broker up)."""
