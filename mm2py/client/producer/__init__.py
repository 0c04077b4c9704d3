"""The raw producer: whole RecordBatches appended with acks=all, idempotent and pipelined.

Modules, each importing only those listed before it: ``batches`` (what a batch must look like
before it is produced, rounds), ``state`` (producer id, epoch, sequences), ``requests`` (building,
sending and reading Produce / InitProducerId requests), ``pipeline`` (continuous idempotent produce,
the window kept full across calls) and ``raw``
(:class:`RawProducer`, which ties them together).
"""

from __future__ import annotations

from mm2py.client.errors import ProduceError
from mm2py.client.producer.batches import BatchLike, normalize_batch, prepare_batch
from mm2py.client.producer.raw import RawProducer
from mm2py.client.producer.requests import ProducerConfig
from mm2py.client.producer.state import CONFIRMED_FOR_S, PRODUCER_STATE_LOST, producer_state_lost

__all__ = [
    "CONFIRMED_FOR_S",
    "PRODUCER_STATE_LOST",
    "BatchLike",
    "ProduceError",
    "ProducerConfig",
    "RawProducer",
    "normalize_batch",
    "prepare_batch",
    "producer_state_lost",
]
