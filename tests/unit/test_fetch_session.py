"""The client side of incremental fetch sessions (KIP-227), as a pure state machine.

The model broker below applies requests the way Kafka's FetchSession does (a session per id, an
expected epoch, partitions added/updated/forgotten); the property test checks invariant
SAME-OFFSETS: whatever requests, answers and losses happen, every partition the broker reads is
read from the offset the client last asked for.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mm2py.protocol.errors_codes import NONE
from mm2py.protocol.fetch_session import (
    FETCH_SESSION_ID_NOT_FOUND,
    FETCH_SESSION_TOPIC_ID_ERROR,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_FETCH_SESSION_EPOCH,
    FetchSession,
    Params,
    SessionRequest,
    next_epoch,
)
from mm2py.protocol.types import TopicPartition
from tests.support.hypothesis_examples import examples

A, B, C = (TopicPartition("t", i) for i in range(3))
IDS = {"t": uuid.UUID(int=7)}


def params(offset: int) -> Params:
    return (offset, 1 << 20, 0)


@dataclass
class ModelBroker:
    """A broker's session cache, as Kafka's ``FetchManager.newContext`` treats requests."""

    sessions: dict[int, tuple[int, dict[TopicPartition, Params]]] = field(default_factory=dict)
    next_id: int = 100
    cache_slots: int = 10

    def handle(self, req: SessionRequest) -> tuple[int, int, dict[TopicPartition, Params]]:
        """(error code, session id, the partitions read with their parameters)."""
        if req.full:
            self.sessions.pop(req.session_id, None)
            read = dict(req.send)
            if req.epoch == FINAL_EPOCH or len(self.sessions) >= self.cache_slots:
                return NONE, 0, read
            self.next_id += 1
            self.sessions[self.next_id] = (next_epoch(INITIAL_EPOCH), read)
            return NONE, self.next_id, read
        if req.session_id not in self.sessions:
            return FETCH_SESSION_ID_NOT_FOUND, 0, {}
        epoch, held = self.sessions[req.session_id]
        if epoch != req.epoch:
            return INVALID_FETCH_SESSION_EPOCH, req.session_id, {}
        held = {**held, **dict(req.send)}
        for tp in req.forget:
            held.pop(tp, None)
        if not held:
            del self.sessions[req.session_id]
            return NONE, 0, {}
        self.sessions[req.session_id] = (next_epoch(epoch), held)
        return NONE, req.session_id, held


def test_first_request_is_full_then_only_changes_are_sent() -> None:
    s = FetchSession()
    req = s.request({A: params(0), B: params(5)}, IDS, by_id=True)
    assert (req.session_id, req.epoch, req.full) == (0, INITIAL_EPOCH, True)
    assert [tp for tp, _ in req.send] == [A, B]
    assert s.answered(NONE, 42)
    req = s.request({A: params(3), B: params(5)}, IDS, by_id=True)
    assert (req.session_id, req.epoch, req.send, req.forget) == (42, 1, [(A, params(3))], [])
    assert s.answered(NONE, 42)
    req = s.request({A: params(3), C: params(0)}, IDS, by_id=True)
    assert (req.epoch, req.send, req.forget) == (2, [(C, params(0))], [B])
    assert s.answered(NONE, 42)
    assert s.held == {A: params(3), C: params(0)}
    assert (s.full_requests, s.incremental_requests) == (1, 2)


def test_a_changed_size_limit_or_leader_epoch_is_sent_again() -> None:
    s = FetchSession()
    s.request({A: params(0)}, IDS, by_id=True)
    s.answered(NONE, 9)
    assert s.request({A: (0, 100, 0)}, IDS, by_id=True).send == [(A, (0, 100, 0))]
    s.answered(NONE, 9)
    assert s.request({A: (0, 100, 4)}, IDS, by_id=True).send == [(A, (0, 100, 4))]


@pytest.mark.parametrize("error, keeps_id", [
    (FETCH_SESSION_ID_NOT_FOUND, False),
    (INVALID_FETCH_SESSION_EPOCH, True),
    (FETCH_SESSION_TOPIC_ID_ERROR, True),
])  # fmt: skip
def test_a_session_error_makes_the_next_request_full(error: int, keeps_id: bool) -> None:
    s = FetchSession()
    s.request({A: params(0)}, IDS, by_id=True)
    s.answered(NONE, 9)
    s.request({A: params(1)}, IDS, by_id=True)
    assert not s.answered(error, 9)
    req = s.request({A: params(1)}, IDS, by_id=True)
    # the old id (if the broker still has it) is closed by the full request that opens a new one
    assert (req.full, req.session_id, req.send) == (True, 9 if keeps_id else 0, [(A, params(1))])
    assert s.resets == 1


def test_an_unanswered_request_makes_the_next_one_full() -> None:
    s = FetchSession()
    s.request({A: params(0)}, IDS, by_id=True)
    s.answered(NONE, 9)
    s.request({A: params(4)}, IDS, by_id=True)
    s.failed()  # did the broker move A to 4? unknown
    req = s.request({A: params(4), B: params(0)}, IDS, by_id=True)
    assert req.full and dict(req.send) == {A: params(4), B: params(0)}


def test_no_session_kept_means_full_requests() -> None:
    s = FetchSession()
    s.request({A: params(0)}, IDS, by_id=True)
    assert s.answered(NONE, 0)  # the broker's cache is full
    assert s.request({A: params(0)}, IDS, by_id=True).full


def test_a_recreated_topic_or_a_version_switch_makes_a_full_request() -> None:
    s = FetchSession()
    s.request({A: params(0)}, IDS, by_id=True)
    s.answered(NONE, 9)
    assert s.request({A: params(0)}, {"t": uuid.UUID(int=8)}, by_id=True).full
    s.answered(NONE, 10)
    assert s.request({A: params(0)}, {"t": uuid.UUID(int=8)}, by_id=False).full


def test_one_request_at_a_time_and_close() -> None:
    s = FetchSession()
    s.request({A: params(0)}, IDS, by_id=True)
    with pytest.raises(RuntimeError):
        s.request({A: params(0)}, IDS, by_id=True)
    s.answered(NONE, 9)
    req = s.close()
    assert req is not None and (req.session_id, req.epoch, req.send) == (9, FINAL_EPOCH, [])
    assert s.close() is None


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(2**31 - 1) == 1 and next_epoch(0) == 1 and next_epoch(5) == 6


steps = st.lists(st.tuples(
    st.dictionaries(st.sampled_from([A, B, C]), st.integers(0, 3), max_size=3),  # wanted offsets
    st.sampled_from(["answer", "answer", "answer", "lost", "lost-after-apply", "evict", "full"]),
), max_size=30)  # fmt: skip


@settings(max_examples=examples(300))
@given(steps)
def test_the_broker_always_reads_the_offsets_asked_for(
    script: list[tuple[dict[TopicPartition, int], str]],
) -> None:
    broker, s = ModelBroker(), FetchSession()
    for offsets, event in script:
        wanted = {tp: params(o) for tp, o in offsets.items()}
        req = s.request(wanted, IDS, by_id=True, full=event == "full")
        if event == "lost":  # the request never reached the broker
            s.failed()
            continue
        error, session_id, read = broker.handle(req)
        if event == "lost-after-apply":  # the broker applied it, the answer was lost
            s.failed()
            continue
        if s.answered(error, session_id):
            assert read == wanted or (session_id == 0 and read in ({}, wanted))  # SAME-OFFSETS
            assert s.held == (wanted if session_id else {})
        if event == "evict":
            broker.sessions.clear()


def test_changed_keys_names_the_moved_entries_of_two_dicts_in_the_same_order() -> None:
    from mm2py.protocol.fetch_session import changed_keys

    old = {TopicPartition("t", p): p * 10 for p in range(6)}
    new = dict(old)
    new[TopicPartition("t", 4)] = 41
    new[TopicPartition("t", 1)] = 11
    assert changed_keys(new, old) == [TopicPartition("t", 1), TopicPartition("t", 4)]
    assert changed_keys(dict(old), old) == []
    # other keys, or the same keys in another order: not comparable this way
    assert changed_keys({**old, TopicPartition("u", 0): 0}, old) is None
    assert changed_keys(dict(reversed(list(old.items()))), old) is None
