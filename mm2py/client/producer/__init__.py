"""The raw producer: whole RecordBatches appended with acks=all, idempotent and pipelined.

Modules, each importing only those listed before it: ``batches`` (what a batch must look like
before it is produced, waves), ``state`` (producer id, epoch, sequences), ``requests`` (building,
sending and reading Produce / InitProducerId requests), ``results`` (what a submission came to:
an acknowledged prefix per partition and its failure), ``lanes`` (one partition's queue and
unacknowledged batches), ``leaders`` (lanes without a known leader), ``throttle`` (the target's
quota throttling), ``pipeline`` (continuous idempotent produce, the window kept full across
calls, each lane re-sending its own batches) and ``raw`` (:class:`RawProducer`, which ties them
together). Callers above the producer use only what this package exports.
"""

from __future__ import annotations

from mm2py.client.errors import ProduceError
from mm2py.client.producer.batches import BatchLike, normalize_batch, plain_produce_bytes
from mm2py.client.producer.raw import RawProducer
from mm2py.client.producer.requests import MAX_WINDOW, ProducerConfig, RequestMux
from mm2py.client.producer.results import Acknowledged, LaneStoppedError, PartitionFailure, Submission
from mm2py.client.producer.state import CONFIRMED_FOR_S, PRODUCER_STATE_LOST, producer_state_lost

__all__ = [
    "CONFIRMED_FOR_S",
    "MAX_WINDOW",
    "PRODUCER_STATE_LOST",
    "Acknowledged",
    "BatchLike",
    "LaneStoppedError",
    "PartitionFailure",
    "ProduceError",
    "ProducerConfig",
    "RawProducer",
    "RequestMux",
    "Submission",
    "normalize_batch",
    "plain_produce_bytes",
    "producer_state_lost",
]
