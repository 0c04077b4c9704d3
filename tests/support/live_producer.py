"""Live traffic for tests against real brokers: numbered records produced at a steady pace."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer


class LiveProducer:
    """Produces numbered records to every partition of ``topic`` at a steady pace until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, per_tick: int = 20) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                                  "enable.idempotence": True, "compression.type": "lz4"})
        self.topic, self.partitions, self.per_tick = topic, partitions, per_tick
        self.produced = 0
        self.stopped = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        def delivered(err: object, _msg: object) -> None:
            if err is not None:
                self.errors.append(str(err))

        while not self.stopped.is_set():
            for _ in range(self.per_tick):
                i = self.produced
                self.producer.produce(self.topic, f"live-{i}".encode(), f"k{i}".encode(),
                                      partition=i % self.partitions, on_delivery=delivered)
                self.produced += 1
            self.producer.poll(0)
            time.sleep(0.05)
        self.producer.flush(30)

    def __enter__(self) -> LiveProducer:
        self.thread.start()
        return self

    def stop(self) -> int:
        """Stop, wait until everything produced is acknowledged; returns how many records."""
        self.stopped.set()
        self.thread.join(60)
        assert not self.thread.is_alive() and not self.errors, f"producing failed: {self.errors[:3]}"
        return self.produced

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(60)
