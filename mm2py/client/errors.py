"""The asyncio client's errors: the transport failed (not a broker error code), or a produce call
delivered only part of its batches."""

from __future__ import annotations

from mm2py.errors import Mm2pyError
from mm2py.protocol.errors_codes import BrokerError

__all__ = [
    "ClientError",
    "ConnectionLostError",
    "NoLeaderError",
    "ProduceError",
    "RequestTimeoutError",
    "ResendRefusedError",
    "is_retriable_error",
]


class ClientError(Mm2pyError):
    """A failure of the client machinery (not a broker error code)."""

    retriable: bool = False


class ConnectionLostError(ClientError):
    """The connection to a broker failed or closed; in-flight requests may or may not have run."""

    retriable = True


class RequestTimeoutError(ClientError):
    """No response within the request timeout."""

    retriable = True


class ResendRefusedError(ClientError):
    """A batch sent again after a failure was refused as out of sequence while more of the
    partition's batches may be on the broker than it remembers (five): it may hold this batch and
    later ones. Which of them it holds can only be read from the partition itself; sending under a
    new producer id would append them twice. Not retriable in place."""


class NoLeaderError(ClientError):
    """Metadata does not (yet) name a reachable leader for a partition."""

    retriable = True


class ProduceError(ClientError):
    """A produce call that did not deliver everything; ``offsets`` holds what was acknowledged
    (a prefix per partition, -1 for the rest, in input order)."""

    def __init__(self, message: str, offsets: list[int], cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.offsets = offsets
        self.cause = cause


def is_retriable_error(exc: BaseException) -> bool:
    """Whether a failed request may be sent again: a retriable client or broker error, or an OS-level
    connection failure or time-out."""
    if isinstance(exc, ClientError):
        return exc.retriable
    if isinstance(exc, BrokerError):
        return exc.retriable
    return isinstance(exc, (ConnectionError, TimeoutError))
