"""mm2py.connectors.heartbeat and the worker's start-up of it (mm2py.runtime.worker_startup) on the
real clusters: once the worker begins, every pair emitting heartbeats writes ``Heartbeat(source,
target, now)`` to the ``heartbeats`` topic of its target (created compacted), about every interval,
until the worker stops; a pair told not to emit writes none."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.mm2_records import Heartbeat
from mm2py.runtime.worker_startup import WorkerStartup
from tests.support.brokers import admin, mirror_config, read_all, unique, wait_until

pytestmark = pytest.mark.integration


def _beats(bootstrap: str, source: str) -> list[Heartbeat]:
    out = []
    for r in read_all(bootstrap, "heartbeats", timeout=30):
        beat = Heartbeat.from_record(r.key, r.value)
        if beat.source_alias == source:
            out.append(beat)
    return out


async def test_each_emitting_pair_writes_heartbeats_to_its_target_until_the_worker_stops(
        east: KafkaCluster, west: KafkaCluster) -> None:
    src, dst = unique("hb-east"), unique("hb-west")  # aliases of this test alone: its heartbeats' keys
    config = mirror_config({src: east.bootstrap, dst: west.bootstrap}, {
        f"{src}->{dst}": {"emit.heartbeats.enabled": True, "emit.heartbeats.interval.seconds": 1},
        f"{dst}->{src}": {"emit.heartbeats.enabled": False, "enabled": True},
    })
    startup: WorkerStartup = WorkerStartup(config, lambda name: None)  # type: ignore[type-arg]
    assert set(startup.heartbeats) == {f"{src}->{dst}"}
    emitter = startup.heartbeats[f"{src}->{dst}"]
    began = int(time.time() * 1000)
    startup.begin()
    try:
        # a beat a second once the topic exists: two are there within seconds (30 s: far beyond)
        await asyncio.to_thread(wait_until, lambda: len(_beats(west.bootstrap, src)) >= 2, 30, 0.3,
                                "two heartbeats on the target")
    finally:
        for task in await startup.stop():
            await asyncio.wait_for(task, 30)
    ended = int(time.time() * 1000)
    beats = _beats(west.bootstrap, src)
    assert {(b.source_alias, b.target_alias) for b in beats} == {(src, dst)}
    stamps = [b.timestamp for b in beats]
    assert stamps == sorted(stamps) and began - 1000 <= stamps[0] and stamps[-1] <= ended
    assert emitter.sent == len(beats) and emitter.failures == 0
    assert _beats(east.bootstrap, dst) == [], "a pair told not to emit wrote heartbeats"
    resource = ConfigResource(ResourceType.TOPIC, "heartbeats")
    client = admin(west.bootstrap)  # must outlive the future
    described = client.describe_configs([resource])[resource].result(30)
    assert described["cleanup.policy"].value == "compact"
