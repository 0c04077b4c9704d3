"""engine/target_retention.py: records the target deleted that the source still holds, found by
the run syncs exactly, and the setting that did it named (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mm2py.engine.target_retention import deleted_on_target, retention_cause, target_offset
from mm2py.protocol.types import TopicPartition

TP, REMOTE = TopicPartition("orders", 0), TopicPartition("east.orders", 0)


def test_a_source_offset_lies_where_its_run_put_it() -> None:
    # runs: source 0..9 -> target 5..14 (the remote partition held 5 records of its own before),
    # a gap of 10 on the source (compaction), then source 20.. -> target 15..
    syncs = [(0, 5), (20, 15)]
    assert target_offset(syncs, 0) == 5
    assert target_offset(syncs, 7) == 12
    assert target_offset(syncs, 20) == 15
    assert target_offset(syncs, 31) == 26
    assert target_offset([(3, 0)], 2) is None  # before every run: nothing to say


def test_the_target_starting_past_the_sources_first_record_is_a_loss_of_that_many_offsets() -> None:
    syncs = [(0, 0)]
    loss = deleted_on_target(TP, REMOTE, syncs, source_start=0, target_start=1000)
    assert loss is not None
    assert (loss.expected_start, loss.target_start, loss.offsets) == (0, 1000, 1000)
    # the source deleted as much (its own retention): nothing the source holds is missing
    assert deleted_on_target(TP, REMOTE, syncs, source_start=1000, target_start=1000) is None
    # the target keeps more than the source: fine
    assert deleted_on_target(TP, REMOTE, syncs, source_start=1000, target_start=400) is None
    # no history for it: no verdict
    assert deleted_on_target(TP, REMOTE, [], source_start=0, target_start=1000) is None
    assert loss.as_dict("c")["remote_partition"] == "east.orders-0"


def test_a_source_log_start_in_a_gap_never_makes_a_loss_of_records_the_target_still_has() -> None:
    # source 0..9 -> target 0..9; source 10..19 compacted away; source 20.. -> target 10..
    syncs = [(0, 0), (20, 10)]
    # the source's log starts inside the gap (at 15): its first record is 20, at 10 on the target
    assert deleted_on_target(TP, REMOTE, syncs, source_start=15, target_start=10) is None


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 20)), min_size=1, max_size=8),
       st.integers(0, 600), st.integers(0, 600))
def test_a_loss_is_named_only_when_records_the_source_holds_are_gone(
        runs: list[tuple[int, int]], source_start: int, target_start: int) -> None:
    """A mirrored partition built run by run (each run of ``n`` records after a gap of ``g``
    offsets on the source); the verdict agrees with the records themselves."""
    syncs, mapping, u, d = [], {}, 0, 0
    for n, gap in runs:
        u += gap
        syncs.append((u, d))
        for i in range(n):
            mapping[u + i] = d + i
        u, d = u + n, d + n
    target_start = min(target_start, d)  # a log never starts past its end
    held = [s for s in mapping if s >= source_start]  # records the source still holds
    gone = [s for s in held if mapping[s] < target_start]  # ...that the target no longer has
    loss = deleted_on_target(TP, REMOTE, syncs, source_start, target_start)
    if loss is not None:
        assert gone, (syncs, source_start, target_start, loss)  # never a false alarm
        assert loss.offsets <= target_start - mapping[min(held)]  # never overstated
    elif held and source_start in mapping:
        assert not gone  # a log start on a record: exact


def test_the_cause_names_the_remote_topics_setting_that_keeps_less() -> None:
    forever = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
    week = {**forever, "retention.ms": "604800000"}
    cause = retention_cause("east.orders", forever, week)
    assert "retention.ms=604800000 (the source topic's: -1)" in cause
    assert "retention.bytes" not in cause
    compacted, deleting = {**forever, "cleanup.policy": "compact"}, {**forever, "cleanup.policy": "delete"}
    assert "cleanup.policy=delete (the source topic's: compact)" in retention_cause("t", compacted, deleting)
    small = {**forever, "retention.bytes": "1048576"}
    assert "retention.bytes=1048576" in retention_cause("t", {**forever, "retention.bytes": "2097152"}, small)
    # a target keeping more is no cause; equal settings point elsewhere
    assert "DeleteRecords" in retention_cause("t", week, forever)
    assert "DeleteRecords" in retention_cause("t", week, week)
    assert "compare t's retention.ms" in retention_cause("t", None, week)
