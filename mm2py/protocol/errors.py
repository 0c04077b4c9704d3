"""Error types raised by the sans-IO protocol layer.

Every decoder in :mod:`mm2py.protocol` raises only :class:`ProtocolError` (or a subclass) on bad
input, never ``IndexError``/``struct.error``/``ValueError`` leaking from the parsing internals.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Bytes that do not follow the Kafka protocol."""


class TruncatedError(ProtocolError):
    """The buffer ends before the structure it should contain."""


class CorruptBatchError(ProtocolError):
    """A RecordBatch whose CRC, length or header fields are invalid. Never forwarded."""


class UnsupportedError(ProtocolError):
    """Well-formed input that this implementation does not handle (e.g. magic < 2)."""


class KafkaApiError(ProtocolError):
    """A broker answered with a non-zero error code."""

    def __init__(self, code: int, message: str = "") -> None:
        self.code = code
        super().__init__(f"Kafka error {code}{': ' + message if message else ''}")
