"""The pure rules of ``mm2py audit``: a flow's source and target partitions compared, batch by
batch where the bytes are the same and record by record where they are not (no I/O here; the
reads are in :mod:`mm2py.operations.audit`)."""

from mm2py.engine.audit.anchors import Anchor, AnchorBook, AnchorKind
from mm2py.engine.audit.outcome import (
    CompareMode,
    Mismatch,
    MismatchKind,
    OffsetRange,
    PartitionOutcome,
    PartitionStatus,
)
from mm2py.engine.audit.partition import Ends, PartitionAudit
from mm2py.engine.audit.walk import PartitionWalk

__all__ = [
    "Anchor",
    "AnchorBook",
    "AnchorKind",
    "CompareMode",
    "Ends",
    "Mismatch",
    "MismatchKind",
    "OffsetRange",
    "PartitionAudit",
    "PartitionOutcome",
    "PartitionStatus",
    "PartitionWalk",
]
