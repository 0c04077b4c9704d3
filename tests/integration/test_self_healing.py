"""An in-process task that fails is started again by the worker, with back-off, from its committed
progress: counted in metrics, shown in status, nothing lost or doubled on real brokers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mm2py.client.connection import BrokerConnection, ConnectionFactory
from mm2py.connectors.mirror_task import build_task
from mm2py.engine.task import TaskRunner
from mm2py.engine.task_contract import TaskSpec
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.errors import CorruptBatchError
from mm2py.runtime.inprocess import FlowRunner
from tests.support.brokers import (
    by_partition,
    create_topic,
    end_offsets,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    unique,
)
from tests.support.cut_proxy import CutProxy

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


def test_a_cut_connection_with_a_deep_window_restarts_the_task_and_loses_nothing(
    east: KafkaCluster, west: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten batches of a partition in flight (``mm2py.produce.inflight.batches=10``) when the
    connection to the target is cut after the broker appended all ten, none answered. The broker
    remembers the last five only, so the task's re-send is refused (ResendRefusedError) instead of
    being taken under a new producer id; the task fails, is started again and resumes exactly from
    the target's tail: every record once, in order."""
    topic = create_topic(east.bootstrap, unique("deep"), partitions=1)
    config = mirror_config({"east": east.bootstrap, "west": west.bootstrap}, {"east->west": {
        "topics": topic, "tasks.max": 1, "mm2py.produce.inflight.batches": 10,
        "mm2py.coalesce.enabled": "false"}})
    flow = config.enabled_flows()[0]
    host, _, port = west.bootstrap.rpartition(":")
    proxy = CutProxy(host, int(port))
    real_connect = ConnectionFactory.connect

    async def connect(self: ConnectionFactory, h: str, p: int, node_id: int = -1) -> BrokerConnection:
        if p == int(port):  # the target broker: through the proxy
            return await real_connect(self, "127.0.0.1", proxy.port, node_id)
        return await real_connect(self, h, p, node_id)

    monkeypatch.setattr(ConnectionFactory, "connect", connect)
    builds: list[TaskRunner] = []

    async def builder(spec: TaskSpec) -> TaskRunner:
        builds.append(await build_task(spec, commit_interval=0.2))
        return builds[-1]

    def produce(n: int, tag: str) -> None:
        produce_records(east.bootstrap, topic, make_records(n, partition=0, tag=tag),
                        compression="lz4", linger_ms=0, extra={"batch.num.messages": 20})

    async def target_holds(runner: FlowRunner, n: int) -> dict[str, Any]:
        for _ in range(600):
            status = runner.status()
            ends = await asyncio.to_thread(end_offsets, west.bootstrap, f"east.{topic}")
            if sum(ends.values()) >= n and status["tasks"][0]["state"] == "RUNNING":
                return status
            await asyncio.sleep(0.1)
        raise AssertionError(f"the target did not get to {n} records: {runner.status()}")

    async def main() -> dict[str, Any]:
        await proxy.start()
        # the first batch goes alone (the partition is not confirmed yet); the next ten fill the
        # window, and their connection is cut once the broker has appended them
        proxy.cut_after(10, skip=1)
        runner = FlowRunner(flow, commit_interval=0.2, builder=builder)
        await runner.start()
        try:
            return await target_holds(runner, 3200)
        finally:
            await runner.stop()
            await proxy.close()

    produce(3200, "deep")  # one backlog: the task's first fetch holds all of it
    status = asyncio.run(main())
    task = status["tasks"][0]
    assert proxy.cuts == 1
    assert len(builds) == 2 and task["restarts"] == 1, status
    assert builds[0].state == "FAILED" and "ResendRefusedError" in str(builds[0].trace), builds[0].trace
    src, dst = read_all(east.bootstrap, topic), read_all(west.bootstrap, f"east.{topic}")
    assert by_partition(dst) == by_partition(src)  # nothing lost, nothing twice, in order
