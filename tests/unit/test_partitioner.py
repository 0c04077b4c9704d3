"""Java's murmur2 partitioner (protocol/partitioner.py) and the progress fold that relies on it."""

from __future__ import annotations

import itertools
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mm2py.protocol.connect_offsets import Position, ProgressFold, encode_key, encode_value
from mm2py.protocol.partitioner import murmur2, partition_for_key
from mm2py.protocol.types import TopicPartition

# Kafka's own vectors (UtilsTest.testMurmur2), as Java's signed ints
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "signed"), KAFKA_VECTORS.items())
def test_murmur2_matches_kafkas_vectors(key: bytes, signed: int) -> None:
    assert murmur2(key) == signed & 0xFFFFFFFF


def test_partition_for_key_is_the_positive_hash_modulo() -> None:
    # -973932308 & 0x7fffffff = 1173551340
    assert partition_for_key(b"21", 25) == 1173551340 % 25
    assert partition_for_key(b"21", 1) == 0
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for_key(b"21", 0)


@given(st.binary(max_size=64), st.integers(1, 100))
def test_partition_is_in_range(key: bytes, n: int) -> None:
    assert 0 <= partition_for_key(key, n) < n


TP = TopicPartition("orders", 1)
KEY = encode_key("east", TP)
HOME = partition_for_key(KEY, 25)
STRAY = (HOME + 7) % 25


def _fold(records: list[tuple[int, int, bytes | None]]) -> ProgressFold:
    fold = ProgressFold("east", partitions=25)
    for partition, ts, value in records:
        fold.add(partition, ts, KEY, value)
    return fold


def test_a_key_in_two_partitions_resolves_to_its_newest_record_in_any_read_order(
        caplog: pytest.LogCaptureFixture) -> None:
    records = [(STRAY, 100, encode_value(9)), (STRAY, 300, encode_value(49)),  # an older mm2py
               (HOME, 200, encode_value(29))]                                # MM2, in between
    for order in itertools.permutations(records):
        # a partition's own records stay in their order (a reader interleaves partitions only)
        if [r for r in order if r[0] == STRAY] != records[:2]:
            continue
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            fold = _fold(list(order))
        assert fold.positions() == {TP: Position(50)}
        assert fold.stray() == {TP: [STRAY]}
        assert sum("live in 2 partitions" in r.message for r in caplog.records) == 1


def test_a_tie_goes_to_the_proper_partition_and_a_newer_tombstone_forgets() -> None:
    stray, home = (STRAY, 100, encode_value(9)), (HOME, 100, encode_value(4))
    assert _fold([stray, home]).positions() == {TP: Position(5)}
    assert _fold([home, stray]).positions() == {TP: Position(5)}
    gone = _fold([(STRAY, 100, encode_value(9)), (HOME, 200, None)])
    assert gone.positions() == {}
    assert gone.stray() == {TP: [STRAY]}  # still there, waiting for a repair


def test_within_a_partition_the_later_record_wins_whatever_its_timestamp() -> None:
    # compaction keeps a partition's last record of a key: a clock that stepped back changes nothing
    fold = _fold([(HOME, 500, encode_value(9)), (HOME, 100, encode_value(3))])
    assert fold.positions() == {TP: Position(4)}
    assert fold.stray() == {}


# -- LAST_IN_PARTITION_WINS: offer() and settle() fold as add() does, record by record -------------
ALT_KEY = KEY.replace(b",", b", ")  # the same partition's key as another writer spells it
OTHER_KEY = encode_key("east", TopicPartition("orders", 2))
_RECORD = st.tuples(st.sampled_from([HOME, STRAY, (HOME + 3) % 25]), st.integers(0, 50),
                    st.sampled_from([KEY, ALT_KEY, OTHER_KEY]),
                    st.one_of(st.none(), st.integers(0, 99).map(encode_value)))


@given(st.lists(_RECORD, max_size=40), st.lists(st.integers(0, 40), max_size=3))
def test_offered_records_settle_to_what_folding_each_one_gives(
        records: list[tuple[int, int, bytes, bytes | None]], settles: list[int]) -> None:
    one_by_one, offered = ProgressFold("east", partitions=25), ProgressFold("east", partitions=25)
    for partition, ts, key, value in records:
        one_by_one.add(partition, ts, key, value)
    for i, (partition, ts, key, value) in enumerate(records):
        if i in settles:  # a catch-up ended here
            assert offered.settle() == []
        offered.offer(partition, ts, key, value)
    assert offered.settle() == []
    assert offered.positions() == one_by_one.positions()
    assert offered.stray() == one_by_one.stray()
    assert offered.settle() == []  # nothing twice
    assert offered.positions() == one_by_one.positions()


def test_only_a_keys_last_record_in_a_partition_is_decoded() -> None:
    fold = ProgressFold("east", partitions=25)
    fold.offer(HOME, 1, KEY, b"{not json")  # replaced before it is read: never decoded
    fold.offer(HOME, 2, KEY, encode_value(6))
    assert fold.settle() == [] and fold.positions() == {TP: Position(7)}
    assert fold.records == 1
    # a malformed last record is reported, and the key keeps what it had before this catch-up
    fold.offer(HOME, 3, KEY, encode_value(8))
    fold.offer(HOME, 4, KEY, b"{not json")
    errors = fold.settle()
    assert len(errors) == 1 and "not a Connect offset record" in str(errors[0])
    assert fold.positions() == {TP: Position(7)}


# -- the repair's plan (stores/progress_repair.plan_repair) ---------------------------------------
def test_the_repair_plan_moves_strays_home_and_empties_their_partitions() -> None:
    from mm2py.stores.progress_repair import Last, plan_repair

    other_tp = TopicPartition("orders", 2)
    other = encode_key("east", other_tp)  # a key that lives in the emptied partition by right
    n = 25
    other_home = partition_for_key(other, n)
    stray = other_home if other_home != HOME else (HOME + 1) % n  # strays share that partition
    keys = {
        KEY: {stray: Last(300, encode_value(49)), HOME: Last(200, encode_value(29))},
        other: {other_home: Last(50, encode_value(7))},
    }
    ends = {p: 10 for p in range(n)}
    plan = plan_repair(keys, ends, n)
    assert plan.strays == [KEY]
    assert plan.cuts == {stray: 10}
    expected = {(HOME, KEY, encode_value(49))}  # the newest, to its proper partition
    if other_home == stray:  # emptied, so written again
        expected.add((other_home, other, encode_value(7)))
    assert set(plan.writes) == expected

    # a newer tombstone in the stray partition: the proper partition's older value must not revive
    third = next(p for p in range(n) if p not in (HOME, stray))
    gone = plan_repair({KEY: {stray: Last(300, None), HOME: Last(200, encode_value(29)),
                              third: Last(100, encode_value(3))}}, ends, n)
    assert gone.cuts == {third: 10}
    assert (HOME, KEY, None) in gone.writes
    # nothing outside its partition: nothing to do
    assert plan_repair({other: {other_home: Last(1, encode_value(1))}}, ends, n) == type(plan)()
