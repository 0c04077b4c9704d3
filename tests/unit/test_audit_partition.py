"""Where a partition's audit starts (anchors: offset syncs and stored positions), what the syncs say
about source offsets deleted before they were mirrored, and the conclusion for the partition."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from mm2py.engine.audit import (
    Anchor,
    AnchorBook,
    AnchorKind,
    Ends,
    MismatchKind,
    OffsetRange,
    PartitionAudit,
    PartitionStatus,
)
from tests.support.audit_batches import batches, end_of, mirrored

#: reaches the compiled path's stand-ins: the pure-Python pass of ``make test`` runs it again
pytestmark = pytest.mark.native_path

POSITION = AnchorKind.POSITION


def book(source_start: int, target_start: int, syncs: Sequence[tuple[int, int]] = (),
         positions: Sequence[tuple[int, int]] = ()) -> AnchorBook:
    """An AnchorBook of (source, target) syncs and positions, added in the order given."""
    b = AnchorBook(source_start, target_start)
    for source, target in syncs:
        b.add_sync(source, target)
    for source, target in positions:
        b.add_position(source, target)
    return b


def test_the_earliest_anchor_still_on_both_sides_is_the_start() -> None:
    syncs = [(300, 300), (0, 0), (100, 100), (180, 120)]
    assert book(0, 0, syncs).start() == Anchor(0, 0)
    assert book(50, 0, syncs).start() == Anchor(50, 50)  # inside the run 0..100: linear
    assert book(0, 120, syncs).start() == Anchor(120, 180)
    assert book(101, 0, syncs).start() == Anchor(120, 180)  # 100->180 is no run (a gap)
    assert book(301, 0, syncs).start() is None
    assert book(0, 0).start() is None
    positions = [(260, 250), (90, 90)]
    assert book(200, 0, syncs, positions).start() == Anchor(250, 260, POSITION)
    assert book(0, 0, syncs, positions).start() == Anchor(0, 0)
    assert book(0, 0, [], positions).start() == Anchor(90, 90, POSITION)


def test_a_run_of_syncs_keeps_its_ends_only() -> None:
    b = book(0, 0, [(u, u) for u in range(0, 1000, 100)] + [(1500, 1000), (1600, 1100), (1700, 1200)])
    assert b.syncs == [(0, 0), (900, 900), (1000, 1500), (1200, 1700)]
    b.add_sync(450, 450)  # out of order: kept as it is
    assert b.syncs == [(0, 0), (450, 450), (900, 900), (1000, 1500), (1200, 1700)]
    assert book(250, 0, b_syncs := [(u, u) for u in range(0, 1000, 100)]).start() == Anchor(250, 250)
    assert len(b_syncs) == 10


def test_syncs_say_which_source_offsets_below_the_log_start_were_never_mirrored() -> None:
    # mirrored 0..999 to 0..999, paused; the source deleted up to 1500; resumed there at target 1000
    syncs = [(u, u) for u in range(0, 1000, 100)] + [(1500, 1000), (1600, 1100)]
    assert book(1500, 0, syncs).deleted() == [(OffsetRange(1000, 1500), 1000)]
    assert book(1200, 0, syncs).deleted() == [(OffsetRange(1000, 1200), 1000)]  # the rest is readable
    assert book(900, 0, syncs).deleted() == []
    # a stored position is no point of the linear mapping; a source offset synced again
    # (mirrored twice) is no loss
    assert book(100, 0, [(0, 0), (60, 60)], [(90, 50)]).deleted() == []
    assert book(100, 0, [(0, 0), (5, 10), (15, 20)]).deleted() == []


def _ends(source: list, target: list, source_start: int = 0, target_start: int = 0) -> Ends:
    return Ends(source_start, end_of(source, source_start), target_start, end_of(target, target_start))


def _run(audit: PartitionAudit, source: list, target: list) -> None:
    walk = audit.walk
    assert walk is not None
    walk.add_source([b for b in source if b.next_offset > walk.source.fetch_next], walk.source.end)
    walk.add_target([b for b in target if b.next_offset > walk.target.fetch_next], walk.target.end)
    walk.step()
    assert audit.done


def test_a_partition_that_agrees_says_what_it_verified_and_what_it_did_not() -> None:
    source = batches(10, 10)
    target = mirrored(source[:8], target_start=5)
    audit = PartitionAudit(_ends(source, target), book(0, 0, [(0, 5), (40, 45)]))
    _run(audit, source, target)
    out = audit.outcome()
    assert out.status is PartitionStatus.AGREE and out.mismatch is None
    assert (out.source, out.target) == (OffsetRange(0, 80), OffsetRange(5, 85))
    assert out.batches_identical == 8 and out.source_bytes > 0 and out.target_bytes > 0
    assert out.anchor == (0, 5, "offset sync")
    assert any("target offsets 0..4 come before the first anchor" in n for n in out.notes)
    assert any("source offsets 80..99 come after the target's end" in n for n in out.notes)


def test_records_deleted_before_they_were_mirrored_are_a_mismatch() -> None:
    before = batches(10, 10)  # 0..99, mirrored to 0..99, then the flow paused
    after = batches(5, 10, start=150, first_value=150)  # 100..149 deleted; resumed at 150
    target = mirrored(before) + mirrored(after, target_start=100)
    audit = PartitionAudit(Ends(150, 200, 0, 150), book(150, 0, [(0, 0), (150, 100), (200, 150)]))
    _run(audit, after, target)
    out = audit.outcome()
    assert out.status is PartitionStatus.MISMATCH and out.mismatch is not None
    assert out.mismatch.kind is MismatchKind.SOURCE_DELETED
    assert out.mismatch.source == OffsetRange(100, 150) and "100..149" in out.mismatch.detail
    assert out.mismatch.target == OffsetRange(100, 101)
    assert (out.source, out.target) == (OffsetRange(150, 200), OffsetRange(100, 150))


def test_a_source_that_skips_offsets_itself_makes_deleted_ranges_a_note() -> None:
    after = batches(5, 10, start=150, first_value=150, gaps=[2])  # an aborted transaction inside
    target = mirrored(after, target_start=100)
    audit = PartitionAudit(Ends(150, end_of(after), 0, 150), book(150, 0, [(0, 0), (150, 100)]))
    _run(audit, after, target)
    out = audit.outcome()
    assert out.status is PartitionStatus.AGREE and out.mismatch is None
    assert any("100..149 were not mirrored" in n and "aborted" in n for n in out.notes)


def test_without_an_anchor_a_target_with_records_is_unaligned() -> None:
    out = PartitionAudit(Ends(0, 10, 0, 10), book(0, 0)).outcome()
    assert out.status is PartitionStatus.UNALIGNED and "0..9" in out.notes[0]
    out = PartitionAudit(Ends(0, 10, 0, 0), book(0, 0)).outcome()
    assert out.status is PartitionStatus.AGREE and out.source is None
    assert "not on the target yet" in out.notes[0]


def test_a_partition_that_could_not_be_read_is_an_error() -> None:
    audit = PartitionAudit(Ends(0, 10, 0, 10), book(0, 0, [(0, 0)]))
    audit.fail("source offset 0 is gone: its log starts at 5 now")
    out = audit.outcome()
    assert audit.done and out.status is PartitionStatus.ERROR and "log starts at 5" in out.notes[-1]
