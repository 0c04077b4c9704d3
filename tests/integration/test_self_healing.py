"""An in-process task that fails is started again by the worker, with back-off, from its committed
progress: counted in metrics, shown in status, nothing lost or doubled on real brokers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers import (
    by_partition,
    create_topic,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    unique,
)

from connectors.mirror_task import build_task
from mm2py.engine.task import TaskRunner
from mm2py.engine.task_api import TaskSpec
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.errors import CorruptBatchError
from mm2py.runtime.inprocess import FlowRunner

pytestmark = pytest.mark.integration


def test_a_failed_task_restarts_by_itself_and_resumes_exactly(east: KafkaCluster, west: KafkaCluster) -> None:
    topic = create_topic(east.bootstrap, unique("heal"), partitions=2)
    for p, codec in ((0, "lz4"), (1, "zstd")):  # many small batches: many fetches
        produce_records(east.bootstrap, topic, make_records(2000, partition=p, tag=f"h{p}"),
                        compression=codec, linger_ms=0, extra={"batch.num.messages": 20})
    config = mirror_config({"east": east.bootstrap, "west": west.bootstrap}, {"east->west": {
        "topics": topic, "tasks.max": 1}}, **{"east.consumer.max.partition.fetch.bytes": "2000"})
    flow = config.enabled_flows()[0]
    builds: list[TaskRunner] = []

    async def builder(spec: TaskSpec) -> TaskRunner:
        runner = await build_task(spec, commit_interval=0.2)
        if not builds:  # the first incarnation meets a batch it must refuse, mid-stream
            polls = 0
            real_poll = runner.source.poll

            async def poll(positions: Any) -> Any:
                nonlocal polls
                polls += 1
                if polls == 8:
                    raise CorruptBatchError("CRC mismatch (injected by the test)")
                return await real_poll(positions)

            runner.source.poll = poll  # type: ignore[method-assign]
        builds.append(runner)
        return runner

    async def main() -> dict[str, Any]:
        runner = FlowRunner(flow, commit_interval=0.2, builder=builder)
        await runner.start()
        try:
            for _ in range(600):
                status = runner.status()
                task = status["tasks"][0] if status["tasks"] else None
                if task and task["records"] >= 4000 and task["state"] == "RUNNING":
                    return status
                await asyncio.sleep(0.1)
            raise AssertionError(f"the task did not recover: {runner.status()}")
        finally:
            await runner.stop()

    status = asyncio.run(main())
    task = status["tasks"][0]
    assert len(builds) == 2 and task["restarts"] == 1, status
    assert builds[0].state == "FAILED" and "CRC mismatch" in str(builds[0].trace)
    src, dst = read_all(east.bootstrap, topic), read_all(west.bootstrap, f"east.{topic}")
    assert by_partition(dst) == by_partition(src)  # nothing lost, nothing twice, in order
    assert task["records"] == 4000  # the counters carried across the restart count each record once
