"""LeaderRoutes: a request's partitions grouped by leader, looked up once per metadata generation."""

from __future__ import annotations

from mm2py.client.routes import LeaderRoutes
from mm2py.protocol.types import TopicPartition


def _tp(p: int, topic: str = "t") -> TopicPartition:
    return TopicPartition(topic, p)


def _counted(leaders: dict[TopicPartition, int | None]) -> tuple[LeaderRoutes, list[TopicPartition]]:
    """Routes over ``leaders`` (read when looked up, so a test may change them), and the list of
    partitions looked up so far."""
    asked: list[TopicPartition] = []

    def leader_of(tp: TopicPartition) -> int | None:
        asked.append(tp)
        return leaders[tp]

    return LeaderRoutes(leader_of), asked


def test_partitions_are_grouped_by_leader_and_the_leaderless_named() -> None:
    leaders = {_tp(0): 1, _tp(1): 2, _tp(2): 1, _tp(3): None}
    routes = LeaderRoutes(leaders.get)
    groups, leaderless = routes.group({_tp(p): p * 10 for p in range(4)}, generation=1)
    assert groups == {1: {_tp(0): 0, _tp(2): 20}, 2: {_tp(1): 10}}
    assert leaderless == [_tp(3)]


def test_a_leader_is_looked_up_once_per_generation_and_again_after_a_metadata_change() -> None:
    leaders: dict[TopicPartition, int | None] = {_tp(p): 1 for p in range(3)}
    routes, asked = _counted(leaders)
    items = {_tp(p): p for p in range(3)}
    assert routes.group(items, generation=1) == ({1: items}, [])
    assert routes.group({**items, _tp(0): 99}, generation=1) == ({1: {**items, _tp(0): 99}}, [])
    assert sorted(asked) == [_tp(p) for p in range(3)], "each partition's leader is looked up once"
    # the leader of partition 1 moved: the next generation's grouping sees it
    leaders[_tp(1)] = 2
    groups, _ = routes.group(items, generation=2)
    assert groups == {1: {_tp(0): 0, _tp(2): 2}, 2: {_tp(1): 1}}
    assert len(asked) == 6


def test_a_partition_without_a_leader_is_asked_again_until_it_has_one() -> None:
    leaders: dict[TopicPartition, int | None] = {_tp(0): 1, _tp(1): None}
    routes = LeaderRoutes(leaders.get)
    items = {_tp(0): 0, _tp(1): 1}
    assert routes.group(items, generation=5) == ({1: {_tp(0): 0}}, [_tp(1)])
    leaders[_tp(1)] = 1  # elected, seen without a generation change (no metadata was read)
    assert routes.group(items, generation=5) == ({1: items}, [])


def test_one_leader_for_all_yet_a_request_with_a_partition_it_does_not_lead() -> None:
    leaders: dict[TopicPartition, int | None] = {_tp(0): 1, _tp(1): 1, _tp(0, "u"): None}
    routes = LeaderRoutes(leaders.get)
    assert routes.group({_tp(0): 0, _tp(1): 1}, generation=1) == ({1: {_tp(0): 0, _tp(1): 1}}, [])
    groups, leaderless = routes.group({_tp(0): 0, _tp(0, "u"): 7}, generation=1)
    assert groups == {1: {_tp(0): 0}} and leaderless == [_tp(0, "u")]


def test_the_same_partitions_again_are_grouped_without_a_lookup_until_the_metadata_changes() -> None:
    leaders: dict[TopicPartition, int | None] = {_tp(p): 1 for p in range(3)}
    routes, asked = _counted(leaders)
    items = {_tp(p): p for p in range(3)}
    assert routes.group(items, generation=1) == ({1: items}, [])
    routes._routes.clear()  # were the routes read again, each partition would be looked up again
    assert routes.group({tp: 7 for tp in items}, generation=1) == ({1: dict.fromkeys(items, 7)}, [])
    assert len(asked) == 3
    # as many partitions, but others: looked up as before (and found leaderless here)
    leaders[_tp(3)] = None
    assert routes.group({_tp(0): 1, _tp(1): 1, _tp(3): 1}, generation=1) == ({1: {_tp(0): 1, _tp(1): 1}},
                                                                           [_tp(3)])
    assert len(asked) == 6
    # a new generation: partition 2 lost its leader, and the same request says so
    leaders[_tp(2)] = None
    groups, leaderless = routes.group(items, generation=2)
    assert groups == {1: {_tp(0): 0, _tp(1): 1}} and leaderless == [_tp(2)]
