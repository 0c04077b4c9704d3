"""The Kafka Connect facade's pure parts: config validation per key, the connectors' config
definitions, the active-topics registry and the sink that feeds it, logger levels (no broker needed)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from mm2py.config.models import FlowSettings, MirrorMakerConfig
from mm2py.engine.task_contract import Delivered, PutTask, SinkError
from mm2py.protocol.types import TopicPartition
from mm2py.rest_api.connect.defs import WORKER_PREFIXES, definitions, groups
from mm2py.rest_api.connect.loggers import LEVELS, LoggerLevels, level_name
from mm2py.rest_api.connect.validate import problems, value_infos
from mm2py.runtime.active_topics import ActiveTopics, WatchedSink

SOURCE = {"name": "m", "connector.class": "org.apache.kafka.connect.mirror.MirrorSourceConnector",
          "source.cluster.alias": "east", "target.cluster.alias": "west", "topics": "orders.*",
          "tasks.max": "2", "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter"}
KNOWN = {"east": "e:1", "west": "w:1"}


def test_a_valid_connector_config_has_no_problem() -> None:
    assert problems(SOURCE, KNOWN) == {}
    heartbeat = {**SOURCE, "connector.class": "MirrorHeartbeatConnector",
                 "emit.heartbeats.interval.seconds": 5}
    assert problems(heartbeat, KNOWN) == {}


def test_each_problem_is_reported_on_the_key_it_concerns() -> None:
    found = problems({**SOURCE, "tasks.max": "0", "topics": "orders([", "tasks.mx": "3",
                      "replication.policy.class": "com.example.MyPolicy", "transforms": "route",
                      "consumer.max.poll.records": "500"}, KNOWN)
    assert sorted(found) == ["replication.policy.class", "tasks.max", "tasks.mx", "topics", "transforms"]
    assert "greater than or equal to 1" in found["tasks.max"][0]
    assert "did you mean 'tasks.max'" in found["tasks.mx"][0]
    assert "com.example.MyPolicy" in found["replication.policy.class"][0]
    assert "orders([" in found["topics"][0]
    assert "not supported" in found["transforms"][0]


def test_the_pair_and_its_clusters_are_checked() -> None:
    assert sorted(problems({"name": "m", "connector.class": "MirrorSourceConnector"}, KNOWN)) == [
        "source.cluster.alias", "target.cluster.alias"]
    same = problems({**SOURCE, "target.cluster.alias": "east"}, KNOWN)
    assert list(same) == ["target.cluster.alias"] and "must differ" in same["target.cluster.alias"][0]
    unknown = problems({**SOURCE, "source.cluster.alias": "north"}, KNOWN)
    assert list(unknown) == ["source.cluster.bootstrap.servers"]
    assert problems({**SOURCE, "source.cluster.alias": "north",
                     "source.cluster.bootstrap.servers": "n:1"}, KNOWN) == {}
    moved = problems({**SOURCE, "target.cluster.bootstrap.servers": "elsewhere:1"}, KNOWN)
    assert "re-pointed" in moved["target.cluster.bootstrap.servers"][0]
    bad = problems({**SOURCE, "source.cluster.alias": "north", "source.cluster.bootstrap.servers": "n:1",
                    "source.cluster.linger.ms": "5"}, KNOWN)
    assert list(bad) == ["source.cluster.linger.ms"]
    assert list(problems({**SOURCE, "connector.class": "JdbcSourceConnector"}, KNOWN)) == ["connector.class"]
    assert list(problems({**SOURCE, "topics": None}, KNOWN)) == ["topics"]


def test_a_source_connector_defines_every_flow_setting_and_each_default_is_valid() -> None:
    keys = definitions("source")
    names = [k.name for k in keys]
    assert len(names) == len(set(names))
    worker = {n for n in FlowSettings.setting_names() if n.startswith(WORKER_PREFIXES)}
    assert worker == {"offset.storage.partitions", "offset.storage.replication.factor"}
    # every flow setting but the Connect worker's own keys, which no Connect connector defines
    assert set(FlowSettings.setting_names()) - {"enabled"} - worker <= set(names)
    assert not worker & set(names)
    for key in keys:
        if key.default is not None and key.group != "Error Handling":
            assert problems({**SOURCE, key.name: key.default}, KNOWN).get(key.name) is None, key.name
    assert groups(keys)[:2] == ["Common", "Error Handling"]
    checkpoint = {k.name for k in definitions("checkpoint")}
    assert "groups" in checkpoint and "topics" not in checkpoint
    assert "emit.heartbeats.interval.seconds" in {k.name for k in definitions("heartbeat")}


def test_validation_values_carry_defaults_given_values_and_errors() -> None:
    keys = definitions("source")
    config = {**SOURCE, "tasks.max": "0", "tasks.mx": "1"}
    configs = value_infos(keys, config, problems(config, KNOWN))
    by_name = {c["value"]["name"]: c for c in configs}
    assert configs[0]["definition"] is None and configs[0]["value"]["name"] == "tasks.mx"
    assert by_name["tasks.max"]["value"]["value"] == "0" and by_name["tasks.max"]["value"]["errors"]
    default = FlowSettings.model_fields["offset_lag_max"].default
    assert by_name["offset.lag.max"]["value"] == {"name": "offset.lag.max", "value": str(default),
                                                  "recommended_values": [], "errors": [], "visible": True}
    assert by_name["topics"]["definition"]["type"] == "LIST"


def _flow() -> Any:
    config = MirrorMakerConfig.from_flat({"clusters": "east,west", "east.bootstrap.servers": "e:1",
                                          "west.bootstrap.servers": "w:1"})
    return config.flow("east", "west")


def test_active_topics_are_the_remote_names_kept_until_reset() -> None:
    section: dict[str, Any] = {}
    saves: list[dict[str, Any]] = []
    topics = ActiveTopics(section, lambda: saves.append({k: list(v) for k, v in section.items()}))
    flow = _flow()
    topics.record(flow, {"orders", "payments"})
    topics.record(flow, {"orders"})  # known: nothing written
    assert topics.topics("east->west") == ["east.orders", "east.payments"]
    assert saves == [{"east->west": ["east.orders", "east.payments"]}]
    topics.reset("east->west")
    assert topics.topics("east->west") == [] and len(saves) == 2
    topics.reset("east->west")  # nothing to forget: no write
    assert len(saves) == 2


class _Sink:
    """A sink whose puts deliver one batch per partition, or fail after the first partition."""

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.recovered, self.closed = fail, 0, False

    def submit(self, batches: Any) -> PutTask:
        delivered = [Delivered(tp, 0, 0, 1, 0) for tp, _ in batches]

        async def put() -> list[Delivered]:
            if self.fail:
                raise SinkError("refused", delivered[:1])
            return delivered

        return PutTask(put())

    def recover(self) -> None:
        self.recovered += 1

    async def end_offsets(self, partitions: Any) -> dict[TopicPartition, int]:
        return dict.fromkeys(partitions, 7)

    async def close(self) -> None:
        self.closed = True


async def test_a_watched_sink_tells_the_acknowledged_topics_and_passes_everything_on() -> None:
    told: list[set[str]] = []
    inner = _Sink()
    sink = WatchedSink(inner, told.append)
    put = sink.submit([(TopicPartition("a", 0), []), (TopicPartition("b", 1), [])])
    await put.wait()
    assert put.done() and len(put.result()) == 2 and told == [{"a", "b"}]
    failing = WatchedSink(_Sink(fail=True), told.append)
    put = failing.submit([(TopicPartition("c", 0), []), (TopicPartition("d", 0), [])])
    await put.wait()
    with pytest.raises(SinkError):
        put.result()
    assert told[-1] == {"c"}  # what was delivered before the failure
    sink.recover()
    tp = TopicPartition("a", 0)
    assert inner.recovered == 1 and await sink.end_offsets([tp]) == {tp: 7}
    await sink.close()
    assert inner.closed
    await asyncio.sleep(0)


async def test_a_watched_sink_hands_the_acknowledged_batches_to_the_live_sync() -> None:
    batches: list[list[Delivered]] = []
    sink = WatchedSink(_Sink(), lambda _topics: None, batches.append)
    put = sink.submit([(TopicPartition("a", 0), []), (TopicPartition("b", 1), [])])
    await put.wait()
    delivered = put.result()
    assert batches == [delivered] and len(delivered) == 2
    failing = WatchedSink(_Sink(fail=True), lambda _topics: None, batches.append)
    put = failing.submit([(TopicPartition("c", 0), []), (TopicPartition("d", 0), [])])
    await put.wait()
    with pytest.raises(SinkError):
        put.result()
    assert batches[-1] == [Delivered(TopicPartition("c", 0), 0, 0, 1, 0)]  # delivered before the failure


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> Iterator[str]:
    """A logger namespace of the test's own, with a child that has a level of its own."""
    name = f"parity_{request.node.name}"
    logging.getLogger(f"{name}.quiet").setLevel(logging.ERROR)
    logging.getLogger(f"{name}.follows")
    yield name
    for n in (name, f"{name}.quiet", f"{name}.follows"):
        logging.getLogger(n).setLevel(logging.NOTSET)


def test_a_level_is_set_on_a_namespace_and_every_logger_under_it(namespace: str) -> None:
    levels = LoggerLevels()
    before = logging.getLogger(f"{namespace}.follows").getEffectiveLevel()
    changed = levels.set(namespace, "DEBUG")
    assert logging.getLogger(namespace).level == logging.DEBUG
    assert logging.getLogger(f"{namespace}.quiet").getEffectiveLevel() == logging.DEBUG
    assert logging.getLogger(f"{namespace}.follows").getEffectiveLevel() == logging.DEBUG
    follows = [f"{namespace}.follows"] if before != logging.DEBUG else []
    expected = [namespace, f"{namespace}.quiet", *follows]
    assert changed == sorted(expected)
    assert levels.set(namespace, "DEBUG") == []  # nothing changes the second time
    shown = levels.one(f"{namespace}.quiet")
    assert shown["level"] == "DEBUG" and isinstance(shown["last_modified"], int)
    assert levels.all()[namespace]["level"] == "DEBUG"
    assert levels.set(f"{namespace}.quiet", "WARN") == [f"{namespace}.quiet"]
    assert logging.getLogger(f"{namespace}.quiet").level == logging.WARNING
    levels.set(f"{namespace}.quiet", "OFF")
    assert f"{namespace}.quiet" not in levels.all()  # as Connect: loggers turned off are not listed
    assert levels.one("ROOT")["level"] == level_name(logging.getLogger().getEffectiveLevel())


def test_level_names_are_connects() -> None:
    assert [level_name(v) for v in (logging.CRITICAL, logging.WARNING, 25, 5, 0)] == [
        "FATAL", "WARN", "INFO", "TRACE", "ALL"]
    assert all(level_name(value) == name for name, value in LEVELS.items())


def test_the_spark_driver_records_the_topics_its_rounds_had_acknowledged() -> None:
    from mm2py.engine.latency import PartitionTimes
    from mm2py.engine.task_contract import TaskMetrics
    from mm2py.runtime.spark.driver.flow_runner import SparkFlowRunner
    from mm2py.runtime.spark.executor.round import RoundResult

    runner = SparkFlowRunner(_flow())
    told: list[set[str]] = []
    runner.on_acknowledged = lambda flow, topics: told.append(topics)
    a0, b0 = TopicPartition("a", 0), TopicPartition("b", 0)
    acked, fetched_only = PartitionTimes(), PartitionTimes()
    acked.replication.observe(0.01)
    fetched_only.age.observe(0.01)  # fetched, nothing acknowledged yet
    metrics = TaskMetrics(times={a0: acked, b0: fetched_only})
    runner.absorb(RoundResult("east->west", 0, (a0, b0), {a0: 1}, metrics, True), now=0)
    runner.absorb(RoundResult("east->west", 0, (a0, b0), {a0: 1}, metrics, True), now=1)
    assert told == [{"a"}]  # once
    runner.forget_acknowledged()
    runner.absorb(RoundResult("east->west", 0, (a0, b0), {a0: 1}, metrics, True), now=2)
    assert told == [{"a"}, {"a"}]
