"""Consumer groups moved to the target cluster of a flow (failover), as ``mm2py offsets`` and the
REST API's group routes do it (the command line is ``mm2py/cli/offsets.py``; failback's translation,
``failback.py``, commits through :func:`apply` too).

``translate`` prints, for each partition a group committed on the source, where that group should
resume on the target: from the flow's checkpoints on the target (what MM2's
``RemoteClusterUtils.translateOffsets`` reads), and for partitions without a checkpoint yet from the
source group's committed offsets translated with the offset syncs (the same exact rule as the
checkpoint connector). ``apply`` commits those offsets to the group on the target (failback rows:
on the source) — only with ``--execute`` (otherwise it prints what it would do), and only while
the group has no active members there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from mm2py.config.errors import ConfigError
from mm2py.config.models import FlowConfig
from mm2py.config.security import Side
from mm2py.connectors.checkpoint import mirror_rule
from mm2py.engine.checkpoints import CheckpointLog, translate_group
from mm2py.engine.translation import Direction
from mm2py.errors import ClusterUnreachableError, Mm2pyError
from mm2py.operations.translator import read_offset_syncs, source_topic_of
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.mm2_records import Checkpoint
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import (
    ClusterAdmin,
    GroupOffset,
    GroupOffsetsRefusedError,
    StoreError,
    librdkafka_config,
)
from mm2py.stores.positions import PositionStore
from mm2py.stores.topic_tail import TopicTail


def check_topic_regex(regex: str | None, name: str) -> None:
    """A bad topic regular expression is a ConfigError naming the option it came from."""
    if regex is None:
        return
    try:
        re.compile(regex)
    except re.error as exc:
        raise ConfigError(f"invalid {name} {regex!r}: {exc}", name) from None


class FailoverError(Mm2pyError):
    """A request the tool cannot carry out; the message is shown as it is."""


class UnknownGroupError(FailoverError):
    """Neither a checkpoint on the target nor a committed offset on the source names the group."""


class GroupActiveError(FailoverError):
    """The group has members on the target: its offsets are not moved under running consumers."""


@dataclass(frozen=True)
class Row:
    group: str
    topic: str  # source topic
    partition: int
    source_offset: int  # the source group's committed offset this translation is for
    target_topic: str
    target_offset: int
    via: str  # "checkpoint" or "offset-syncs"
    metadata: str = ""
    #: FORWARD: the group moves to the target (``target_offset`` is where it resumes there);
    #: BACK: it moves back to the source (``source_offset`` is where it resumes there)
    direction: Direction = Direction.FORWARD

    def __post_init__(self) -> None:
        object.__setattr__(self, "direction", Direction(self.direction))  # "back" read from JSON too

    @property
    def target_partition(self) -> TopicPartition:
        return TopicPartition(self.target_topic, self.partition)

    @property
    def source_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def back(self) -> bool:
        return self.direction is Direction.BACK

    def destination(self) -> tuple[TopicPartition, int]:
        """The partition this row commits to and its offset (on the target, or on the source for
        a failback row)."""
        if self.back:
            return self.source_partition, self.source_offset
        return self.target_partition, self.target_offset


@dataclass
class Translation:
    rows: list[Row]
    notes: list[str]


def _read(flow: FlowConfig, side: Side, topic: str, handler: Any, timeout: float) -> None:
    tail = TopicTail(librdkafka_config(flow, side, "consumer"), topic, handler, name="failover-cli")
    try:
        tail.catch_up(timeout)
    except KafkaException as exc:
        raise FailoverError(f"reading {topic} failed: {exc}") from None
    finally:
        tail.close()


def translate(
    flow: FlowConfig, groups: Sequence[str], topic_regex: str | None = None, timeout: float = 30.0
) -> Translation:
    source = ClusterAdmin.for_cluster(flow, "source", timeout=timeout)
    target = ClusterAdmin.for_cluster(flow, "target", timeout=timeout)
    pattern = re.compile(topic_regex) if topic_regex else None
    wanted = set(groups)
    notes: list[str] = []

    log = CheckpointLog()

    def on_checkpoint(key: bytes | None, value: bytes | None) -> None:
        try:
            cp = Checkpoint.from_record(key, value)
        except ProtocolError:
            return
        if cp.group in wanted:
            log.add(cp)

    target_topics = target.list_topics()  # fails clearly when the target is unreachable
    if flow.checkpoints_topic() in target_topics:
        _read(flow, "target", flow.checkpoints_topic(), on_checkpoint, timeout)
    try:
        committed: dict[str, dict[TopicPartition, GroupOffset]] | None = source.group_offsets(groups)
    except ClusterUnreachableError as exc:
        committed = None
        notes.append(f"{exc}; using the checkpoints on '{flow.target}' only")

    mirrored, rename = mirror_rule(flow, source, target)
    rows: list[Row] = []
    for group in groups:
        cps = log.get(group)
        have = committed.get(group, {}) if committed is not None else {}
        if not cps and not have:
            where = f"no committed offsets on '{flow.source}'" if committed is not None else (
                f"'{flow.source}' is unreachable")
            raise UnknownGroupError(f"unknown group {group!r}: no checkpoints on '{flow.target}' and {where}")

        def directly(offsets: dict[TopicPartition, GroupOffset], group: str = group) -> list[Row]:
            return _translate_directly(flow, group, offsets, mirrored, rename, timeout, notes)

        chosen = group_rows(group, cps, have, directly, source_topic=lambda t: source_topic_of(flow, t),
                            rename=rename, wanted=lambda t: mirrored(t) and (
                                pattern is None or pattern.fullmatch(t) is not None), notes=notes)
        rows.extend(chosen)
        if not chosen:
            notes.append(f"group {group}: no offsets on topics this flow mirrors can be translated")
    rows.sort(key=lambda r: (r.group, r.topic, r.partition))
    return Translation(rows, notes)


def group_rows(
    group: str, checkpoints: Mapping[TopicPartition, Checkpoint],
    committed: Mapping[TopicPartition, GroupOffset],
    directly: Callable[[dict[TopicPartition, GroupOffset]], list[Row]], *,
    source_topic: Callable[[str], str], rename: Callable[[str], str], wanted: Callable[[str], bool],
    notes: list[str],
) -> list[Row]:
    """Where one group resumes on the target, partition by partition: its checkpoint there when it
    is for the offset the group has committed on the source (or the source is not known); else
    that commit translated ``directly`` (exact, or behind where the mirror has not reached it), and
    the checkpoint only when the commit cannot be translated. A checkpoint older than the group's
    commit would make it re-read what it had read since; one newer (the group was reset back on
    the source) would skip."""
    rows: list[Row] = []
    outdated: dict[TopicPartition, Row] = {}
    for ttp, cp in sorted(checkpoints.items()):
        topic = source_topic(ttp.topic)
        if not wanted(topic):
            continue
        row = Row(group, topic, ttp.partition, cp.upstream_offset, ttp.topic, cp.downstream_offset,
                  "checkpoint", cp.metadata)
        now = committed.get(TopicPartition(topic, ttp.partition))
        if now is None or now.offset == cp.upstream_offset:
            rows.append(row)
        else:
            outdated[ttp] = row
    missing = {
        tp: o for tp, o in committed.items()
        if wanted(tp.topic) and ((ttp := TopicPartition(rename(tp.topic), tp.partition)) not in checkpoints
                                 or ttp in outdated)
    }
    direct = directly(missing) if missing else []
    rows.extend(direct)
    translated = {r.target_partition for r in direct}
    for ttp, row in outdated.items():
        current = committed[row.source_partition].offset
        if ttp in translated:
            notes.append(f"group {group}: the checkpoint of {ttp} is for source offset {row.source_offset}; "
                         f"the group has committed {current} since, which is translated instead")
        else:
            rows.append(row)
            notes.append(f"group {group}: the checkpoint of {ttp} is for source offset {row.source_offset}; "
                         f"the group has committed {current} since, which cannot be translated yet")
    return rows


def _translate_directly(
    flow: FlowConfig, group: str, offsets: dict[TopicPartition, GroupOffset],
    mirrored: Any, rename: Any, timeout: float, notes: list[str],
) -> list[Row]:

    # progress first: every sync below a committed position was written before that position
    # (every flow of the pair: their topics are disjoint)
    target = ClusterAdmin.for_cluster(flow, "target", timeout=timeout)
    store = PositionStore(target, flow.source, connector=None)
    try:
        progress = store.load(timeout)
    except KafkaException as exc:
        raise FailoverError(f"reading {store.topic} failed: {exc}") from None
    try:
        syncs = read_offset_syncs(flow, timeout)  # the sync history too: exact far behind
    except StoreError as exc:
        notes.append(f"offset syncs not read ({exc}); partitions without checkpoints left out")
        return []
    cps = translate_group(group, offsets, mirrored=mirrored, rename=rename, syncs=syncs, progress=progress)
    untranslated = len(offsets) - len(cps)
    if untranslated:
        notes.append(f"group {group}: {untranslated} partitions not mirrored far enough to translate")
    return [
        Row(group, source_topic_of(flow, tp.topic), tp.partition, cp.upstream_offset, tp.topic,
            cp.downstream_offset, "offset-syncs", cp.metadata)
        for tp, cp in cps.items()
    ]


def apply(flow: FlowConfig, rows: Sequence[Row], execute: bool, timeout: float = 30.0) -> dict[str, Any]:
    """Current offsets of the rows' groups on the cluster they move to (the target; the source for
    failback rows); commits the rows there when ``execute``, only while no group has members there."""
    back = any(r.back for r in rows)
    if back and not all(r.back for r in rows):
        raise FailoverError("rows of both directions cannot be applied at once")
    side: Side = "source" if back else "target"
    cluster = flow.source if back else flow.target
    admin = ClusterAdmin.for_cluster(flow, side, timeout=timeout)
    groups = sorted({r.group for r in rows})
    for group, state in admin.group_states(groups).items():
        if not state.inactive:
            raise GroupActiveError(
                f"group {group!r} is active on '{cluster}' ({state.members} members, {state.state}); "
                "stop its consumers there first"
            )
    current = admin.group_offsets(groups)
    if execute:
        for group in groups:
            offsets = {tp: GroupOffset(offset, r.metadata) for r in rows if r.group == group
                       for tp, offset in [r.destination()]}
            try:
                admin.alter_group_offsets(group, offsets)
            except GroupOffsetsRefusedError as exc:
                raise FailoverError(str(exc)) from None
    return current
