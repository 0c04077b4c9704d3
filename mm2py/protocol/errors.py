"""Error types raised by the sans-IO protocol layer.

Every decoder in :mod:`mm2py.protocol` raises only :class:`ProtocolError` (or a subclass) on bad
input, never ``IndexError``/``struct.error``/``ValueError`` leaking from the parsing internals.
"""

from __future__ import annotations

from mm2py.errors import Mm2pyError


class ProtocolError(Mm2pyError):
    """Bytes that do not follow the Kafka protocol."""


class TruncatedError(ProtocolError):
    """The buffer ends before the structure it should contain."""


class CorruptBatchError(ProtocolError):
    """A RecordBatch whose CRC, length or header fields are invalid. Never forwarded."""


class UnsupportedError(ProtocolError):
    """Well-formed input that this implementation does not handle (e.g. magic < 2)."""

