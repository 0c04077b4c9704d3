"""``mm2py flow-offsets repair``'s deletion: a broker that has not applied the topic's new
``cleanup.policy`` yet refuses DeleteRecords on a compacted topic (POLICY_VIOLATION); the refused
partitions are asked again, and any other error ends the repair (the admin client is faked)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.stores.progress_repair import _delete_below


class _Admin:
    """Refuses each partition's first ``refusals[p]`` deletions with ``code``."""

    def __init__(self, refusals: dict[int, int], code: int = KafkaError.POLICY_VIOLATION) -> None:
        self.refusals, self.code = dict(refusals), code
        self.asked: list[dict[int, int]] = []

    def delete_records(self, tps: list[CKTopicPartition], **_: Any) -> dict[CKTopicPartition, Future[Any]]:
        self.asked.append({tp.partition: tp.offset for tp in tps})
        out = {}
        for tp in tps:
            fut: Future[Any] = Future()
            if self.refusals.get(tp.partition, 0) > 0:
                self.refusals[tp.partition] -= 1
                fut.set_exception(KafkaException(KafkaError(self.code)))
            else:
                fut.set_result(tp)
            out[tp] = fut
        return out


def test_partitions_refused_while_the_policy_is_not_in_effect_are_asked_again() -> None:
    admin = _Admin({1: 2})
    _delete_below(admin, "mm2-offsets.east.internal", {0: 5, 1: 7, 2: 9}, timeout=10)  # type: ignore[arg-type]
    assert admin.asked == [{0: 5, 1: 7, 2: 9}, {1: 7}, {1: 7}]


def test_another_error_ends_the_repair_at_once() -> None:
    admin = _Admin({0: 1}, code=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        _delete_below(admin, "mm2-offsets.east.internal", {0: 5}, timeout=10)  # type: ignore[arg-type]
    assert len(admin.asked) == 1


def test_a_policy_that_never_takes_effect_fails_after_the_timeout() -> None:
    admin = _Admin({0: 1_000})
    with pytest.raises(KafkaException):
        _delete_below(admin, "mm2-offsets.east.internal", {0: 5}, timeout=0.3)  # type: ignore[arg-type]
    assert 2 <= len(admin.asked) < 10
