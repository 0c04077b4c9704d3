"""Error types raised by the sans-IO protocol layer.

Every decoder in :mod:`mm2py.protocol` raises only :class:`ProtocolError` (or a subclass) on bad
input, never ``IndexError``/``struct.error``/``ValueError`` leaking from the parsing internals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mm2py.errors import Mm2pyError

if TYPE_CHECKING:
    from mm2py.protocol.types import TopicPartition


class ProtocolError(Mm2pyError):
    """Bytes that do not follow the Kafka protocol."""


class TruncatedError(ProtocolError):
    """The buffer ends before the structure it should contain."""


class CorruptBatchError(ProtocolError):
    """A RecordBatch whose CRC, length or header fields are invalid. Never forwarded."""

    #: the partition it was fetched from, when the fetcher knows it (a shared fetch fails only the
    #: task that mirrors that partition)
    partition: TopicPartition | None = None


class UnsupportedError(ProtocolError):
    """Well-formed input that this implementation does not handle (e.g. magic < 2)."""

