"""mm2py.engine.audit.sides: one side of an audited partition holds the fetched batches from its start
(a batch reaching below it cropped) up to its end (nothing at or past it is compared), hands them over
a whole batch or a record at a time, and notes offsets it skips (gaps)."""

from __future__ import annotations

import pytest

from mm2py.engine.audit.sides import Side
from tests.support.audit_batches import BASE_TS, batches

pytestmark = pytest.mark.native_path


def test_batches_are_cropped_to_the_start_and_nothing_at_or_past_the_end_is_handed_over() -> None:
    fetched = batches(3, 4, start=10)  # offsets 10-13, 14-17, 18-21
    side = Side(12, 20)
    side.add(fetched, next_offset=22)
    assert side.fetched_all and not side.gaps_seen
    assert side.fetch_next == 22
    first = side.whole_batch()
    assert first is not None and (first.base_offset, first.last_offset) == (12, 13)
    assert side.buffered == side.bytes_read == first.size + fetched[1].size + fetched[2].size
    assert side.pop_batch() is first
    assert side.buffered == fetched[1].size + fetched[2].size
    second = side.pop_batch()
    assert (second.base_offset, second.last_offset) == (14, 17)
    # 18-21 reaches the end (20): never whole, compared a record at a time up to 19
    assert side.whole_batch() is None and side.at_batch_start and not side.exhausted
    head = side.head()
    assert head is not None and head[0].offsets[head[1]:head[2]] == [18, 19]
    assert [r.offset for r in side.lookahead(10)] == [18, 19]
    rec = side.peek()
    # the third batch's records: its base timestamp is BASE_TS + 8, record j 3j ms later
    assert rec is not None and (rec.offset, rec.timestamp) == (18, BASE_TS + 8)
    side.skip(1)
    assert not side.at_batch_start and side.whole_batch() is None
    rec = side.peek()
    assert rec is not None and (rec.offset, rec.timestamp) == (19, BASE_TS + 8 + 3)
    assert [r.offset for r in side.lookahead(10)] == [19]
    side.skip(1)
    assert side.peek() is None and side.head() is None and side.lookahead(3) == []
    assert side.exhausted
    assert side.bytes_read == sum(b.size for b in fetched) - fetched[0].size + first.size


def test_a_batch_at_or_past_the_end_is_not_buffered_and_one_before_the_fetch_position_is_dropped() -> None:
    fetched = batches(3, 4)  # 0-3, 4-7, 8-11
    side = Side(0, 8)
    side.add(fetched, next_offset=12)
    assert side.bytes_read == fetched[0].size + fetched[1].size
    side.add(fetched[:1], next_offset=4)  # a fetch again from before: nothing new, the position stays
    assert side.bytes_read == fetched[0].size + fetched[1].size and side.fetch_next == 12
    assert [side.pop_batch().base_offset for _ in range(2)] == [0, 4]
    assert side.whole_batch() is None and side.exhausted


def test_fetched_in_pieces_the_side_knows_when_all_is_fetched() -> None:
    fetched = batches(4, 2)  # 0-1, 2-3, 4-5, 6-7
    side = Side(0, 8)
    side.add(fetched[:2], next_offset=4)
    assert side.fetch_next == 4 and not side.fetched_all and not side.exhausted
    assert side.pop_batch().base_offset == 0 and side.pop_batch().base_offset == 2
    assert side.head() is None and not side.exhausted, "exhausted before the rest was fetched"
    side.add(fetched[2:], next_offset=8)
    assert side.fetched_all and not side.gaps_seen
    assert [r.offset for r in side.lookahead(3)] == [4, 5, 6], "lookahead stops at n across batches"
    side.skip(2)
    assert side.whole_batch() is not None and side.at_batch_start


def test_skipped_offsets_are_noted_as_gaps() -> None:
    with_gap = Side(0, 100)
    with_gap.add(batches(3, 4, gaps=[1]), next_offset=15)  # 0-3, then 7-10: 4-6 were left out
    assert with_gap.gaps_seen
    one_offset = Side(0, 100)
    one_offset.add(batches(1, 4) + batches(1, 4, start=5), next_offset=9)  # offset 4 left out
    assert one_offset.gaps_seen
    filtered_at_end = Side(0, 100)
    filtered_at_end.add(batches(2, 4), next_offset=12)  # the fetch moved past 8-11 with no batch
    assert filtered_at_end.gaps_seen and filtered_at_end.fetch_next == 12
    nothing_skipped = Side(0, 100)
    nothing_skipped.add(batches(2, 4), next_offset=8)
    assert not nothing_skipped.gaps_seen
