"""mm2py.runtime.worker_startup without brokers: which pairs get a heartbeat emitter, and the flows'
first start (a flow whose cluster is unreachable started again in the background with back-off until
it starts, dropped once replaced; any other failure stops the worker). The emitters' heartbeats on
real clusters: tests/integration/test_heartbeat.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.errors import ClusterUnreachableError
from mm2py.runtime.worker_startup import HEARTBEAT_KEYS, WorkerStartup

CLUSTERS = {"a": "127.0.0.1:1", "b": "127.0.0.1:2"}


def _config(**settings: Any) -> MirrorMakerConfig:
    return MirrorMakerConfig.from_mapping({"clusters": CLUSTERS, **settings})


class Runner:
    """A flow runner whose start fails ``unreachable`` times with ClusterUnreachableError (then
    ``error``, if given) before it starts."""

    def __init__(self, flow: FlowConfig, unreachable: int = 0, error: Exception | None = None) -> None:
        self.flow = flow
        self.unreachable = unreachable
        self.error = error
        self.attempts = 0
        self.started = asyncio.Event()

    async def start(self) -> None:
        self.attempts += 1
        if self.attempts <= self.unreachable:
            raise ClusterUnreachableError(f"{self.flow.source} did not answer")
        if self.error is not None:
            raise self.error
        self.started.set()


def test_each_pair_emitting_heartbeats_gets_one_emitter_and_named_flows_none() -> None:
    config = _config(flows={"a->b": {"topics": "x"}, "b->a": {"emit.heartbeats.enabled": False}})
    startup: WorkerStartup[Any] = WorkerStartup(config, lambda name: None)
    assert set(startup.heartbeats) == {"a->b"}
    emitter = startup.heartbeats["a->b"]
    assert emitter.flow is config.flows["a->b"] and emitter.topic == "heartbeats"
    startup.flow_added(config.flows["a->b"].named("orders", {}))
    assert set(startup.heartbeats) == {"a->b"}, "a named flow emits heartbeats"
    startup.flow_added(config.flows["a->b"])
    assert startup.heartbeats["a->b"] is emitter, "a pair got a second emitter"
    off = config.flows["a->b"].with_settings({"emit.heartbeats.enabled": False})
    startup.sync_heartbeat(off)
    assert startup.heartbeats == {}
    startup.sync_heartbeat(config.flows["b->a"].with_settings({"emit.heartbeats.enabled": True}))
    assert set(startup.heartbeats) == {"b->a"}


def test_the_heartbeat_keys_are_settings_of_a_flow() -> None:
    flow = _config().flows["a->b"]
    assert flow.emit_heartbeats_enabled and flow.emit_heartbeats_interval_seconds == 1
    changed = flow.with_settings({"emit.heartbeats.enabled": False, "emit.heartbeats.interval.seconds": 7,
                                  "heartbeats.topic.replication.factor": 1})
    assert (changed.emit_heartbeats_enabled, changed.emit_heartbeats_interval_seconds,
            changed.heartbeats_topic_replication_factor) == (False, 7, 1)
    changed = flow.with_settings(dict.fromkeys(HEARTBEAT_KEYS, 2) | {"emit.heartbeats.enabled": False})
    assert changed != flow, "a heartbeat key is no setting of a flow"
    settings = {f.alias for f in FlowConfig.model_fields.values()}
    assert not HEARTBEAT_KEYS - settings


def _quiet_config() -> MirrorMakerConfig:
    return _config(**{"emit.heartbeats.enabled": False, "mm2py.start.retry.backoff.ms": 20,
                      "mm2py.start.retry.backoff.max.ms": 80, "flows": {"a->b": {}, "b->a": {}}})


async def test_a_flow_whose_cluster_is_unreachable_starts_in_the_background_with_back_off() -> None:
    config = _quiet_config()
    late = Runner(config.flows["a->b"], unreachable=3)
    fine = Runner(config.flows["b->a"])
    runners = {"a->b": late, "b->a": fine}
    startup = WorkerStartup(config, runners.get)
    assert startup.heartbeats == {}
    loop = asyncio.get_running_loop()
    began = loop.time()
    await startup.start_flows([late, fine])
    assert fine.started.is_set() and fine.attempts == 1
    assert not late.started.is_set() and len(startup.retries) == 1
    # tries after 20 ms, then 40, 80 (the longest) ms: 140 ms at the least; 30 s is far beyond
    await asyncio.wait_for(late.started.wait(), 30)
    assert late.attempts == 4 and loop.time() - began >= 0.14
    await asyncio.wait_for(startup.retries[0], 30)  # the retry ends once the flow started
    assert await startup.stop() == [] and startup.retries == []


async def test_a_retry_is_dropped_once_the_flow_was_replaced_and_stop_cancels_retries() -> None:
    config = _quiet_config()
    old = Runner(config.flows["a->b"], unreachable=1)
    runners: dict[str, Runner] = {"a->b": old}
    startup = WorkerStartup(config, runners.get)
    await startup.start_flows([old])
    runners["a->b"] = Runner(config.flows["a->b"])  # replaced before the retry is due
    await asyncio.wait_for(startup.retries[0], 30)
    assert old.attempts == 1, "the replaced flow was started again"

    never = Runner(config.flows["b->a"], unreachable=10**6)
    runners["b->a"] = never
    await startup.start_flows([never])
    retry = startup.retries[-1]
    await startup.stop()
    assert retry.done() and startup.stopping.is_set()
    assert not never.started.is_set()


async def test_any_other_start_failure_stops_the_worker_and_a_later_one_ends_the_retry() -> None:
    config = _quiet_config()
    refused = Runner(config.flows["a->b"], error=ValueError("the broker refused the config"))
    startup = WorkerStartup(config, lambda name: None)
    with pytest.raises(ValueError, match="refused the config"):
        await startup.start_flows([refused, Runner(config.flows["b->a"])])
    assert startup.retries == []

    gives_up = Runner(config.flows["a->b"], unreachable=1, error=ValueError("refused later"))
    startup = WorkerStartup(config, {"a->b": gives_up}.get)
    await startup.start_flows([gives_up])
    await asyncio.wait_for(startup.retries[0], 30)  # gave up: no more tries
    assert gives_up.attempts == 2 and not gives_up.started.is_set()
    await startup.stop()
