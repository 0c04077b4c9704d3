"""Writes MM2 offset-sync records to ``mm2-offset-syncs.<alias>.internal``, and the run syncs among
them to mm2py's sync history topic too (confluent-kafka)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from confluent_kafka import Producer

from mm2py.protocol.mm2_records import HistorySync, OffsetSync
from mm2py.rdkafka.admin import client_config

log = logging.getLogger(__name__)


def offset_syncs_topic(alias: str) -> str:
    return f"mm2-offset-syncs.{alias}.internal"


class OffsetSyncWriter:
    """Queues offset syncs; ``flush`` waits until all are acknowledged.

    Syncs go out only after the batch they describe was acknowledged by the target, so a sync never
    points at data the target does not have. ``history_topic``: where the run syncs go as well,
    one key each (``engine/sync_history.py``); one producer writes both topics, so ``flush`` waits
    for both before the task commits its progress.
    """

    def __init__(
        self, bootstrap: str, topic: str, overrides: Mapping[str, object] | None = None,
        history_topic: str | None = None,
    ) -> None:
        conf = client_config(bootstrap, overrides)
        conf.update({"acks": "all", "linger.ms": 5, "enable.idempotence": True})
        self.topic = topic
        self.history_topic = history_topic
        self._producer = Producer(conf)
        self._errors: list[str] = []
        self.sent = 0

    def _on_delivery(self, err: object, _msg: object) -> None:
        if err is not None:
            self._errors.append(str(err))

    def send(self, syncs: Iterable[OffsetSync], runs: Iterable[OffsetSync] = ()) -> None:
        """``syncs`` to the offset-syncs topic; ``runs`` (the run syncs among them) to the history."""
        for sync in syncs:
            # partition 0, as MM2 writes every sync (its readers fold the topic in order)
            self._produce(self.topic, sync.key_bytes(), sync.value_bytes())
            self.sent += 1
        if self.history_topic is not None:
            for sync in runs:
                record = HistorySync.of(sync)
                self._produce(self.history_topic, record.key_bytes(), record.value_bytes())
        self._producer.poll(0)

    def _produce(self, topic: str, key: bytes, value: bytes | None) -> None:
        while True:
            try:
                self._producer.produce(topic, value, key, partition=0, on_delivery=self._on_delivery)
                return
            except BufferError:
                self._producer.poll(0.05)

    def flush(self, timeout: float = 30.0) -> None:
        left = self._producer.flush(timeout)
        if left or self._errors:
            errors, self._errors = self._errors[:3], []
            raise RuntimeError(f"writing offset syncs to {self.topic} failed: {errors or left}")
