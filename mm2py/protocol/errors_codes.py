"""Kafka error codes: name, retriable flag and whether the error means our metadata is stale.

The table is derived from kio's generated ``ErrorCode`` enum (itself generated from Apache
Kafka's ``Errors``), so names and retriable flags follow upstream. Unknown codes (from a newer
broker) map to a non-retriable ``UNKNOWN_CODE_<n>`` entry instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode as _KioErrorCode

from mm2py.errors import Mm2pyError

UNKNOWN_SERVER_ERROR = -1
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
RECORD_LIST_TOO_LARGE = 18
NETWORK_EXCEPTION = 13
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
TOPIC_AUTHORIZATION_FAILED = 29
UNSUPPORTED_VERSION = 35
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
CONCURRENT_TRANSACTIONS = 51
KAFKA_STORAGE_ERROR = 56
UNKNOWN_PRODUCER_ID = 59
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
OFFSET_NOT_AVAILABLE = 78
INVALID_RECORD = 87
PRODUCER_FENCED = 90
UNKNOWN_TOPIC_ID = 100
INCONSISTENT_TOPIC_ID = 103

#: the target refused a batch (or a request's records for a partition) as larger than it accepts
TOO_LARGE = frozenset({MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE})

# Codes after which a client must refresh metadata before retrying (leadership/topic moved).
_INVALIDATES_METADATA = frozenset(
    {
        UNKNOWN_TOPIC_OR_PARTITION,
        LEADER_NOT_AVAILABLE,
        NOT_LEADER_OR_FOLLOWER,
        KAFKA_STORAGE_ERROR,
        FENCED_LEADER_EPOCH,
        UNKNOWN_LEADER_EPOCH,
        OFFSET_NOT_AVAILABLE,
        UNKNOWN_TOPIC_ID,
        INCONSISTENT_TOPIC_ID,
        NOT_COORDINATOR,
        COORDINATOR_NOT_AVAILABLE,
    }
)


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    code: int
    name: str
    retriable: bool
    invalidates_metadata: bool


ERRORS: dict[int, ErrorInfo] = {
    int(e): ErrorInfo(int(e), e.name.upper(), bool(e.retriable), int(e) in _INVALIDATES_METADATA)
    for e in _KioErrorCode
}


def error_info(code: int) -> ErrorInfo:
    info = ERRORS.get(code)
    if info is None:
        return ErrorInfo(code, f"UNKNOWN_CODE_{code}", False, False)
    return info


def error_name(code: int) -> str:
    return error_info(code).name


def is_retriable_code(code: int) -> bool:
    """Whether a broker error code says the same request may succeed later (the upstream flag)."""
    return error_info(code).retriable


def invalidates_metadata(code: int) -> bool:
    return error_info(code).invalidates_metadata


class BrokerError(Mm2pyError):
    """A non-zero error code returned by a broker, with its table entry (well-formed bytes: not a
    :class:`~mm2py.protocol.errors.ProtocolError`)."""

    def __init__(self, code: int, message: str = "") -> None:
        self.code = code
        self.info = error_info(code)
        detail = self.info.name + (f": {message}" if message else "")
        super().__init__(f"Kafka error {code}: {detail}")

    @property
    def retriable(self) -> bool:
        return self.info.retriable

    @property
    def invalidates_metadata(self) -> bool:
        return self.info.invalidates_metadata


def raise_for_code(code: int, message: str = "") -> None:
    if code != NONE:
        raise BrokerError(code, message)
