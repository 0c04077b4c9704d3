"""Several flows of one cluster pair: which source topic two of them would both mirror (pure).

A pair may run several flows (several MirrorSourceConnectors with their own names), each with its
own topic filter. Two flows of a pair must not mirror the same source topic to the same target
topic: their positions are kept apart, so both would copy every record. The worker refuses a flow
(or a filter change) whose filter selects a topic present on the source that another flow of the
pair selects too (:func:`first_overlap`). A topic that appears later and that both select is the
older flow's (``Controller.claimed_by``). MM2's heartbeats topic, which every flow mirrors whatever
its filter says, is always the older flow's and never a conflict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

__all__ = ["Selects", "first_overlap", "older_claim"]

#: a flow's rule for a source topic: would it mirror it (its filter, internal topics, cycles)
Selects = Callable[[str], bool]


def first_overlap(
    topics: Iterable[str], mine: Selects, others: Sequence[tuple[str, Selects]],
    is_heartbeats: Callable[[str], bool],
) -> tuple[str, str] | None:
    """The first topic (in sorted order) that ``mine`` and one of ``others`` (name, rule) both
    select, with that flow's name; None when they are disjoint on ``topics``. Heartbeats topics
    do not count."""
    for topic in sorted(topics):
        if is_heartbeats(topic) or not mine(topic):
            continue
        for name, selects in others:
            if selects(topic):
                return topic, name
    return None


def older_claim(topic: str, older: Sequence[tuple[str, Selects]]) -> str | None:
    """The name of the first flow of ``older`` (oldest first) that selects ``topic``."""
    return next((name for name, selects in older if selects(topic)), None)
