"""Which broker leads each partition, remembered between requests.

A task's fetches and produces name the same thousands of partitions again and again, and the
leaders change only with the metadata: :class:`LeaderRoutes` looks each partition up once per
metadata generation (:attr:`mm2py.client.cluster.ClusterClient.generation`), and when every
partition has one leader (a single broker, or one broker leading them all) a request's partitions
are grouped with one dict copy instead of one lookup each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from mm2py.protocol.types import TopicPartition

__all__ = ["LeaderRoutes"]

X = TypeVar("X")


class LeaderRoutes:
    """Partition -> leader for one metadata generation; partitions without a known leader are
    not remembered (they are looked up again at the next request)."""

    def __init__(self, leader_of: Callable[[TopicPartition], int | None]) -> None:
        self._leader_of = leader_of
        #: the metadata generation :attr:`_routes` was read from; guards every cached route
        self.generation = -1
        self._routes: dict[TopicPartition, int] = {}
        #: the distinct leaders in :attr:`_routes`
        self._leaders: set[int] = set()
        #: by number of partitions, the last request's partitions (in order) found routed to the
        #: one leader: a request naming the same ones again is grouped without hashing them (a
        #: list comparison; a fetch session's thousands, between other requests' few)
        self._seen: dict[int, list[TopicPartition]] = {}

    def group(
        self, items: Mapping[TopicPartition, X], generation: int
    ) -> tuple[dict[int, dict[TopicPartition, X]], list[TopicPartition]]:
        """``items`` by leader, and the partitions whose leader is not known."""
        if generation != self.generation:
            self._routes.clear()
            self._leaders.clear()
            self._seen.clear()
            self.generation = generation
        routes = self._routes
        keys = items.keys()
        seen = self._seen.get(len(items))
        if seen is not None and len(self._leaders) == 1 and list(keys) == seen:
            return {next(iter(self._leaders)): dict(items)}, []
        if not keys <= routes.keys():
            for tp in keys - routes.keys():
                leader = self._leader_of(tp)
                if leader is not None:
                    routes[tp] = leader
                    self._leaders.add(leader)
            if len(self._leaders) == 1 and keys <= routes.keys():
                return self._one_leader(items)
        elif len(self._leaders) == 1:
            return self._one_leader(items)
        groups: dict[int, dict[TopicPartition, X]] = {}
        leaderless: list[TopicPartition] = []
        for tp, x in items.items():
            leader = routes.get(tp)
            if leader is None:
                leaderless.append(tp)
            else:
                groups.setdefault(leader, {})[tp] = x
        return groups, leaderless

    def _one_leader(self, items: Mapping[TopicPartition, X]) -> tuple[dict[int, dict[TopicPartition, X]],
                                                                     list[TopicPartition]]:
        if len(self._seen) >= 8:  # a few request shapes recur; others come and go
            self._seen.clear()
        self._seen[len(items)] = list(items)
        return {next(iter(self._leaders)): dict(items)}, []
