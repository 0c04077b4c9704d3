"""The target topics' batch limits: asked before the first produce, asked again after a refusal,
exact when the configuration is right, halved when the brokers refuse what it says fits."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping

from mm2py.connectors.target_limits import TargetLimits


class Config:
    """What DescribeConfigs answers: each topic's max.message.bytes; ``fails``: it raises."""

    def __init__(self, limits: dict[str, int], fails: bool = False) -> None:
        self.limits, self.fails = limits, fails
        self.asked: list[list[str]] = []

    def __call__(self, topics: list[str]) -> Mapping[str, int]:
        self.asked.append(list(topics))
        if self.fails:
            raise RuntimeError("TOPIC_AUTHORIZATION_FAILED")
        return {t: self.limits[t] for t in topics if t in self.limits}


def test_a_topic_is_asked_for_once_and_its_configured_limit_is_exact() -> None:
    config = Config({"a": 1_048_588, "b": 8_388_608})
    limits = TargetLimits(config)
    assert limits.unknown(["a", "b", "a"]) == ["a", "b"] and limits.limit("a") is None
    asyncio.run(limits.learn(["a", "b"]))
    assert (limits.limit("a"), limits.limit("b")) == (1_048_588, 8_388_608)
    assert limits.unknown(["a", "b"]) == [] and config.asked == [["a", "b"]]


def test_a_refusal_asks_again_and_a_lowered_limit_is_taken_as_configured() -> None:
    config = Config({"a": 8_388_608})
    limits = TargetLimits(config)
    asyncio.run(limits.learn(["a"]))
    config.limits["a"] = 1_048_588  # lowered on the target while mirroring
    limits.refused("a", 4_000_000)
    assert limits.unknown(["a"]) == ["a"]
    asyncio.run(limits.learn(["a"]))
    assert limits.limit("a") == 1_048_588  # exact: the configuration explains the refusal


def test_a_refusal_the_configuration_does_not_explain_halves_the_refused_size() -> None:
    limits = TargetLimits(Config({"a": 1_048_588}))
    asyncio.run(limits.learn(["a"]))
    limits.refused("a", 900_000)  # under the configured limit, refused all the same
    asyncio.run(limits.learn(["a"]))
    assert limits.limit("a") == 450_000
    limits.refused("a", 450_000)
    asyncio.run(limits.learn(["a"]))
    assert limits.limit("a") == 225_000


def test_a_topic_that_cannot_be_described_learns_its_limit_from_refusals() -> None:
    limits = TargetLimits(Config({}, fails=True))
    asyncio.run(limits.learn(["a"]))
    assert limits.limit("a") is None and limits.unknown(["a"]) == []  # not asked again and again
    limits.refused("a", 4_000_000)
    asyncio.run(limits.learn(["a"]))
    assert limits.limit("a") == 2_000_000


def test_a_task_asks_ahead_and_a_put_meanwhile_waits_for_that_answer_instead_of_asking_again() -> None:
    """ask_ahead (a task's start) asks in the background; a put's learn for the same topic while
    the question is under way waits for its answer (one DescribeConfigs, not two). A topic the
    target could not describe yet (not created) is asked for again at its first put."""
    config = Config({"a": 2000})
    answer = threading.Event()

    def describe(topics: list[str]) -> Mapping[str, int]:
        answer.wait(10)
        return config(topics)

    async def run() -> None:
        limits = TargetLimits(describe)
        limits.ask_ahead(["a", "b"])
        limits.ask_ahead(["a"])  # under way already: not asked twice
        put = asyncio.ensure_future(limits.learn(["a"]))
        await asyncio.sleep(0.05)
        assert not put.done() and limits.limit("a") is None
        answer.set()
        await put
        assert limits.limit("a") == 2000 and config.asked == [["a", "b"]]
        assert limits.unknown(["a", "b"]) == ["b"]  # not described: its first put asks again
        await limits.learn(["b"])
        assert config.asked == [["a", "b"], ["b"]] and limits.unknown(["b"]) == []

    asyncio.run(run())
