"""``mm2py offsets translate|apply --direction back``: consumer groups moved back to a flow's source
(failback).

After a failover, consumers ran on the target and committed there: group ``billing`` at offset ``d``
of ``east.orders`` on ``west``. Failing back means resuming them on the source, on ``orders`` of
``east``, at the first record they had not read on the target. Each such offset is translated with
the forward flow's own offset syncs and committed positions, read back exactly
(``mm2py/engine/translation.py``: the source offset of the record at ``d``; at the end of what was
mirrored, the next source offset). That holds for an active-passive pair and for an active-active
one alike: the reverse flow (``west->east``) never mirrors ``east.orders`` (it would be a cycle), so
its checkpoints never name those partitions, and the forward flow's syncs are the exact record of
where each of them came from.

Partitions of topics the flow did not mirror (the target's own topics) are left alone; an offset that
cannot be translated exactly (before the oldest sync still known, past what was mirrored) is left
out with a note saying why, never guessed. Committing (``apply``) is ``failover.py``'s, on
the source cluster: only with ``--execute``, and only while the group has no members there.

Which groups there are to fail back (``failback_groups``, the operator page's list): those committed
on the target on a topic the flow mirrors there (a remote topic of a source partition the pair
committed a position for, as ``translate_back`` takes them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mm2py.config.models import FlowConfig
from mm2py.engine.translation import Direction, NotMirroredError, TranslationError
from mm2py.operations.failover import Row, Translation, UnknownGroupError
from mm2py.operations.translator import FlowTranslator, read_positions, source_topic_of
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin

__all__ = ["FailbackGroup", "committed_on", "failback_groups", "translate_back"]


@dataclass(frozen=True)
class FailbackGroup:
    """A consumer group committed on the flow's target, with the partitions of the flow's remote
    topics it committed there (``east.orders``-0, ...)."""

    group: str
    partitions: tuple[TopicPartition, ...]


def committed_on(
    flow: FlowConfig, committed: Mapping[str, Mapping[TopicPartition, object]],
    positions: Mapping[TopicPartition, Position],
) -> list[FailbackGroup]:
    """The groups of ``committed`` (each group's committed partitions on the target) with a partition
    of a topic the flow mirrors to the target (``positions``: by source partition), by name."""
    policy = flow.replication_policy()
    remote = {policy.format_remote_topic(flow.source, tp.topic) for tp in positions}
    out = []
    for group in sorted(committed):
        mine = tuple(sorted(tp for tp in committed[group] if tp.topic in remote))
        if mine:
            out.append(FailbackGroup(group, mine))
    return out


def failback_groups(flow: FlowConfig, timeout: float = 30.0) -> list[FailbackGroup]:
    """The consumer groups committed on the target on the flow's remote topics: those
    ``translate_back`` can move to the source (``ClusterUnreachableError`` when the target does not
    answer)."""
    target = ClusterAdmin.for_cluster(flow, "target", timeout=timeout)
    groups = target.list_groups()  # fails clearly when the target is unreachable
    positions = read_positions(flow, timeout)
    return committed_on(flow, target.group_offsets(groups) if groups else {}, positions)


def translate_back(
    flow: FlowConfig, groups: Sequence[str], topic_regex: str | None = None, timeout: float = 30.0
) -> Translation:
    """Where each group, as committed on the target, resumes on the source (rows with ``direction``
    ``back``: ``target_offset`` is the group's offset on the target, ``source_offset`` where it goes)."""
    target = ClusterAdmin.for_cluster(flow, "target", timeout=timeout)
    committed = target.group_offsets(groups)  # fails clearly when the target is unreachable
    translator = FlowTranslator.read(flow, timeout)
    mirrored_topics = {tp.topic for tp in translator.positions}
    pattern = re.compile(topic_regex) if topic_regex else None
    rows: list[Row] = []
    notes: list[str] = []
    for group in groups:
        have = committed.get(group, {})
        if not have:
            raise UnknownGroupError(f"unknown group {group!r}: no committed offsets on '{flow.target}'")
        found = False
        for ttp, offset in sorted(have.items()):
            source = source_topic_of(flow, ttp.topic)
            if source not in mirrored_topics or translator.target_topic_of(source) != ttp.topic:
                continue  # a topic of the target's own, or one this flow never mirrored
            if pattern and not pattern.fullmatch(source):
                continue
            found = True
            try:
                t = translator.translate(ttp.topic, ttp.partition, offset.offset, Direction.BACK)
            except NotMirroredError as exc:
                notes.append(f"group {group}: {exc}")
                continue
            except TranslationError as exc:
                notes.append(f"group {group}: left out: {exc}")
                continue
            rows.append(Row(group, t.source_topic, ttp.partition, t.source_offset, ttp.topic, offset.offset,
                            "offset-syncs", offset.metadata, Direction.BACK))
        if not found:
            notes.append(f"group {group}: no offsets on topics this flow mirrors to '{flow.target}'")
    rows.sort(key=lambda r: (r.group, r.topic, r.partition))
    return Translation(rows, notes)

