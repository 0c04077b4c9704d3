"""Writes MM2 offset-sync records to ``mm2-offset-syncs.<alias>.internal`` (confluent-kafka)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from confluent_kafka import Producer

from mm2py.protocol.mm2_records import OffsetSync
from mm2py.stores.admin import client_config

log = logging.getLogger(__name__)


def offset_syncs_topic(alias: str) -> str:
    return f"mm2-offset-syncs.{alias}.internal"


class OffsetSyncWriter:
    """Queues offset syncs; ``flush`` waits until all are acknowledged.

    Syncs go out only after the batch they describe was acknowledged by the target, so a sync never
    points at data the target does not have.
    """

    def __init__(
        self, bootstrap: str, topic: str, overrides: Mapping[str, object] | None = None
    ) -> None:
        conf = client_config(bootstrap, overrides)
        conf.update({"acks": "all", "linger.ms": 5, "enable.idempotence": True})
        self.topic = topic
        self._producer = Producer(conf)
        self._errors: list[str] = []
        self.sent = 0

    def _on_delivery(self, err: object, _msg: object) -> None:
        if err is not None:
            self._errors.append(str(err))

    def send(self, syncs: Iterable[OffsetSync]) -> None:
        for sync in syncs:
            while True:
                try:
                    # partition 0, as MM2 writes every sync (its readers fold the topic in order)
                    self._producer.produce(
                        self.topic, sync.value_bytes(), sync.key_bytes(), partition=0,
                        on_delivery=self._on_delivery,
                    )
                    break
                except BufferError:
                    self._producer.poll(0.05)
            self.sent += 1
        self._producer.poll(0)

    def flush(self, timeout: float = 30.0) -> None:
        left = self._producer.flush(timeout)
        if left or self._errors:
            errors, self._errors = self._errors[:3], []
            raise RuntimeError(f"writing offset syncs to {self.topic} failed: {errors or left}")
