"""MirrorHeartbeat: ``Heartbeat(source, target, now)`` into the target's ``heartbeats`` topic.

As MirrorMaker 2's MirrorHeartbeatConnector does, every flow ``A->B`` (also a disabled one, unless
``emit.heartbeats.enabled=false``) writes a heartbeat every ``emit.heartbeats.interval.seconds`` to
``heartbeats`` on B. Mirroring carries those topics downstream as ``A.heartbeats``, so a
consumer of B can see which clusters replicate into it and how fresh the replication is.
"""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Producer

from mm2py.config.models import FlowConfig
from mm2py.engine.scheduler import Scheduler
from mm2py.protocol.mm2_records import Heartbeat
from mm2py.protocol.partitioner import JAVA_PARTITIONER
from mm2py.rdkafka.admin import ClusterAdmin, librdkafka_config


class HeartbeatEmitter:
    def __init__(self, flow: FlowConfig) -> None:
        self.flow = flow
        self.topic = flow.replication_policy().heartbeats_topic()
        self.admin = ClusterAdmin.for_cluster(flow, "target")
        # each key where MM2's producer puts it, should the topic have more than one partition
        conf = librdkafka_config(flow, "target", "producer",
                                 {"linger.ms": 0, "acks": "all", "partitioner": JAVA_PARTITIONER})
        self._producer = Producer(conf)
        self.sent = 0
        self.failures = 0
        self._created = False

    def _emit(self) -> None:
        beat = Heartbeat(self.flow.source, self.flow.target, int(time.time() * 1000))

        def on_delivery(err: object, _msg: object) -> None:
            if err is not None:
                self.failures += 1
            else:
                self.sent += 1

        self._producer.produce(self.topic, beat.value_bytes(), beat.key_bytes(), on_delivery=on_delivery)
        self._producer.poll(0)

    async def run(self, stop: asyncio.Event) -> None:
        """A heartbeat every interval until ``stop`` is set (the target unreachable: try next time)."""
        jobs = Scheduler(self.flow.name, stop, on_failure=self._failed)
        jobs.every("emit heartbeat", max(0.1, float(self.flow.emit_heartbeats_interval_seconds)), self._beat)
        await jobs.run()
        await asyncio.to_thread(self._producer.flush, 10)

    async def _beat(self) -> None:
        if not self._created:
            await asyncio.to_thread(
                self.admin.ensure_compacted_topic, self.topic, self.flow.heartbeats_topic_replication_factor,
            )
            self._created = True
        self._emit()

    def _failed(self, _job: str, _exc: Exception) -> None:
        self.failures += 1
