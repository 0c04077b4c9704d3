"""RawFetcher's request parameters, worked out again only for what moved: whatever positions and
size limits come from round to round, they equal the parameters computed from scratch, and the
partitions said to have moved are exactly those whose parameters changed.

The fetcher against real brokers: tests/integration/test_raw_client.py and
test_incremental_fetch_broker.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mm2py.client.fetcher import FetcherConfig, RawFetcher
from mm2py.protocol.types import TopicPartition
from tests.support.hypothesis_examples import examples

PARTS = [TopicPartition(t, p) for t in ("a", "b") for p in range(4)]
SIZE = 1 << 20


class Cluster:
    generation = 0

    def leader_epoch_of(self, tp: TopicPartition) -> int:
        return 7 + tp.partition


def fetcher() -> RawFetcher:
    return RawFetcher(Cluster(), FetcherConfig(partition_max_bytes=SIZE))  # type: ignore[arg-type]


def scratch(positions: dict[TopicPartition, int], limits: dict[TopicPartition, int]) -> dict[
        TopicPartition, tuple[int, int, int]]:
    return {tp: (o, limits.get(tp, SIZE), 7 + tp.partition) for tp, o in positions.items()}


def test_a_limit_of_zero_moves_only_that_partition() -> None:
    f = fetcher()
    positions = dict.fromkeys(PARTS, 5)
    params, moved = f._wanted(1, positions, {})
    assert moved is None and params == scratch(positions, {})
    params, moved = f._wanted(1, dict(positions), {PARTS[2]: 0})
    assert moved is not None and moved[1] == [PARTS[2]] and params[PARTS[2]] == (5, 0, 9)
    positions[PARTS[2]] = 6  # its member polled again: read from its new position
    params, moved = f._wanted(1, dict(positions), {})
    assert moved is not None and moved[1] == [PARTS[2]] and params[PARTS[2]] == (6, SIZE, 9)


rounds = st.lists(
    st.tuples(
        st.dictionaries(st.sampled_from(PARTS), st.integers(0, 3)),  # positions that move
        st.dictionaries(st.sampled_from(PARTS), st.sampled_from([0, 100])),  # this round's limits
        st.booleans(),  # a partition dropped from the request
    ),
    max_size=12,
)


@settings(max_examples=examples(200), deadline=None)
@given(rounds)
def test_parameters_kept_between_rounds_equal_those_computed_from_scratch(
    steps: list[tuple[dict[TopicPartition, int], dict[TopicPartition, int], bool]],
) -> None:
    f = fetcher()
    positions = dict.fromkeys(PARTS, 0)
    last: dict[TopicPartition, tuple[int, int, int]] | None = None
    for moves, limits, drop in steps:
        for tp, by in moves.items():
            positions[tp] = positions.get(tp, 0) + by
        if drop and positions:
            positions.pop(next(iter(positions)))
        limits = {tp: n for tp, n in limits.items() if tp in positions}
        params, moved = f._wanted(1, dict(positions), limits)
        assert params == scratch(positions, limits)
        if moved is not None:
            assert last is not None and moved[0] == last and list(moved[0]) == list(params)
            assert set(moved[1]) == {tp for tp in params if params[tp] != last[tp]}
        last = params
