"""What a fetched batch must look like before it is produced, and how a produce call is cut into waves.

Rules (see FACTS.md): control batches are refused; batches with offset gaps are rebuilt
(``rebuild_contiguous``); foreign producer state is replaced by ours (or removed); baseOffset is
set to 0. Pure code on bytes: one CRC-32C pass when anything inside the CRC changes, no
decompression.
"""

from __future__ import annotations

from collections.abc import Sequence

from mm2py.protocol.batch_edit import for_produce, rebuild_contiguous
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

BatchLike = bytes | bytearray | memoryview | RecordBatch

__all__ = ["BatchLike", "normalize_batch", "plain_produce_bytes", "split_waves", "stamp"]


def _has_producer_state(b: RecordBatch) -> bool:
    return b.producer_id != -1 or b.producer_epoch != -1 or b.base_sequence != -1 or b.is_transactional


def normalize_batch(batch: BatchLike, *, verified: bool = False) -> RecordBatch:
    """Checks and the rebuild a fetched batch needs before any producer state is stamped on it.

    Raises ValueError for a control batch and CorruptBatchError for a bad CRC. ``verified=True``
    says the caller already checked the CRC (e.g. ``RawFetcher`` verifies every batch it returns).
    """
    b = batch if isinstance(batch, RecordBatch) else RecordBatch(batch)
    if b.is_control:
        raise ValueError(f"control batch at offset {b.base_offset} cannot be produced")
    if not verified:
        b.verify()
    # The broker checks the header only (recordsCount == lastOffsetDelta + 1, LogValidator's
    # validateBatch); a per-record delta scan here would put Python work per record on the hot path.
    if not b.is_contiguous():
        b, _ = rebuild_contiguous(b)
    return b


def stamp(b: RecordBatch, producer_id: int, producer_epoch: int, sequence: int) -> bytes:
    """Produce bytes of a normalized batch; a batch already in that form is not copied again."""
    if producer_id == -1 and not _has_producer_state(b):
        # nothing inside the CRC changes: only the offset and leader epoch fields, if at all
        if b.base_offset == 0 and b.partition_leader_epoch == -1:
            return bytes(b)
        return b.rebased(0)
    return for_produce(b, producer_id, producer_epoch, sequence, verify=False)


def plain_produce_bytes(batch: BatchLike) -> bytes:
    """Make a fetched batch acceptable to a stock broker's Produce without idempotence.

    Raises ValueError for a control batch and CorruptBatchError for a bad CRC.
    """
    return stamp(normalize_batch(batch), -1, -1, -1)


def split_waves(items: Sequence[tuple[TopicPartition, object]]) -> list[dict[TopicPartition, int]]:
    """Wave k holds the index (in ``items``) of the k-th item of each partition."""
    waves: list[dict[TopicPartition, int]] = []
    depth: dict[TopicPartition, int] = {}
    for i, (tp, _) in enumerate(items):
        d = depth.get(tp, 0)
        depth[tp] = d + 1
        if d == len(waves):
            waves.append({})
        waves[d][tp] = i
    return waves
