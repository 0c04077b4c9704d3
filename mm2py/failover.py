"""``mm2py offsets``: move consumer groups to the target cluster of a flow (failover).

``translate`` prints, for each partition a group committed on the source, where that group should
resume on the target: from the flow's checkpoints on the target (what MM2's
``RemoteClusterUtils.translateOffsets`` reads), and for partitions without a checkpoint yet from the
source group's committed offsets translated with the offset syncs (the same exact rule as the
checkpoint connector). ``apply`` commits those offsets to the group on the target — only with
``--execute`` (otherwise it prints what it would do), and only while the group has no active
members there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import KafkaException

from mm2py.config.errors import ConfigError
from mm2py.config.models import FlowConfig, load_config
from mm2py.config.security import Side
from mm2py.connectors.checkpoint import mirror_rule
from mm2py.engine.checkpoints import CheckpointLog, translate_group
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.errors import Mm2pyError
from mm2py.protocol.errors import ProtocolError
from mm2py.protocol.mm2_records import Checkpoint, OffsetSync
from mm2py.protocol.types import TopicPartition
from mm2py.stores.admin import (
    ClusterAdmin,
    ClusterUnreachableError,
    GroupOffset,
    GroupOffsetsRefusedError,
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

    @property
    def target_partition(self) -> TopicPartition:
        return TopicPartition(self.target_topic, self.partition)


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


def _source_topic(flow: FlowConfig, target_topic: str) -> str:
    policy = flow.replication_policy()
    upstream = policy.upstream_topic(target_topic)
    if policy.topic_source(target_topic) == flow.source and upstream is not None:
        return upstream
    return target_topic


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
        for ttp, cp in sorted(cps.items()):
            topic = _source_topic(flow, ttp.topic)
            if pattern and not pattern.fullmatch(topic):
                continue
            rows.append(Row(group, topic, ttp.partition, cp.upstream_offset, ttp.topic,
                            cp.downstream_offset, "checkpoint", cp.metadata))
            now = have.get(TopicPartition(topic, ttp.partition))
            if now is not None and now.offset != cp.upstream_offset:
                notes.append(f"group {group}: the checkpoint of {ttp} is for source offset "
                             f"{cp.upstream_offset}; the group has committed {now.offset} since")
        missing = {
            tp: o for tp, o in have.items()
            if TopicPartition(rename(tp.topic), tp.partition) not in cps
            and mirrored(tp.topic) and (pattern is None or pattern.fullmatch(tp.topic))
        }
        if missing:
            rows.extend(_translate_directly(flow, group, missing, mirrored, rename, timeout, notes))
        if not any(r.group == group for r in rows):
            notes.append(f"group {group}: no offsets on topics this flow mirrors can be translated")
    rows.sort(key=lambda r: (r.group, r.topic, r.partition))
    return Translation(rows, notes)


def _translate_directly(
    flow: FlowConfig, group: str, offsets: dict[TopicPartition, GroupOffset],
    mirrored: Any, rename: Any, timeout: float, notes: list[str],
) -> list[Row]:

    syncs = OffsetSyncStore()

    def on_sync(key: bytes | None, value: bytes | None) -> None:
        with contextlib.suppress(ProtocolError):
            syncs.add(OffsetSync.from_record(key, value))

    # progress first: every sync below a committed position was written before that position
    # (every flow of the pair: their topics are disjoint)
    target = ClusterAdmin.for_cluster(flow, "target", timeout=timeout)
    store = PositionStore(target, flow.source, connector=None)
    try:
        progress = store.load(timeout)
    except KafkaException as exc:
        raise FailoverError(f"reading {store.topic} failed: {exc}") from None
    side: Side = "source" if flow.offset_syncs_cluster == flow.source else "target"
    try:
        _read(flow, side, flow.offset_syncs_topic(), on_sync, timeout)
    except TimeoutError as exc:
        notes.append(f"offset syncs not read ({exc}); partitions without checkpoints left out")
        return []
    cps = translate_group(group, offsets, mirrored=mirrored, rename=rename, syncs=syncs, progress=progress)
    untranslated = len(offsets) - len(cps)
    if untranslated:
        notes.append(f"group {group}: {untranslated} partitions not mirrored far enough to translate")
    return [
        Row(group, _source_topic(flow, tp.topic), tp.partition, cp.upstream_offset, tp.topic,
            cp.downstream_offset, "offset-syncs", cp.metadata)
        for tp, cp in cps.items()
    ]


def apply(flow: FlowConfig, rows: Sequence[Row], execute: bool, timeout: float = 30.0) -> dict[str, Any]:
    """Current target offsets of the rows' groups; commits the rows when ``execute``."""
    target = ClusterAdmin.for_cluster(flow, "target", timeout=timeout)
    groups = sorted({r.group for r in rows})
    for group, state in target.group_states(groups).items():
        if not state.inactive:
            raise GroupActiveError(
                f"group {group!r} is active on '{flow.target}' ({state.members} members, {state.state}); "
                "stop its consumers there first"
            )
    current = target.group_offsets(groups)
    if execute:
        for group in groups:
            offsets = {r.target_partition: GroupOffset(r.target_offset, r.metadata) for r in rows
                       if r.group == group}
            try:
                target.alter_group_offsets(group, offsets)
            except GroupOffsetsRefusedError as exc:
                raise FailoverError(str(exc)) from None
    return current


# ----------------------------------------------------------------------------------- command line


def add_parser(sub: Any) -> None:
    """Adds ``offsets translate`` and ``offsets apply`` to the ``mm2py`` command line."""
    offsets = sub.add_parser("offsets", help="translate consumer-group offsets to a flow's target (failover)")
    commands = offsets.add_subparsers(dest="offsets_command", required=True)
    for name, text in (
        ("translate", "print where each group should resume on the target"),
        ("apply", "commit the translated offsets to the groups on the target (dry run unless --execute)"),
    ):
        cmd = commands.add_parser(name, help=text)
        cmd.add_argument("--config", "-c", required=True, help="mm2.properties, YAML or JSON")
        cmd.add_argument("--flow", required=True, help="source->target, e.g. east->west")
        cmd.add_argument("--group", "-g", action="append", required=True, help="consumer group (repeatable)")
        cmd.add_argument("--topic-regex", help="only source topics matching this regular expression")
        cmd.add_argument("--json", action="store_true", help="print JSON instead of a table")
        cmd.add_argument("--timeout", type=float, default=30.0, help="seconds per cluster call (default 30)")
        if name == "apply":
            cmd.add_argument("--execute", action="store_true", help="commit (without it: dry run)")
        cmd.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # librdkafka reports every refused connection; the errors that matter are raised and shown once
    logging.getLogger("mm2py.librdkafka").setLevel(logging.CRITICAL)
    if args.flow.count("->") != 1:
        return _error(f"--flow must look like source->target, got {args.flow!r}")
    source, target = (part.strip() for part in args.flow.split("->"))
    flow = load_config(args.config).flow(source, target)
    check_topic_regex(args.topic_regex, "--topic-regex")
    try:
        result = translate(flow, list(dict.fromkeys(args.group)), args.topic_regex, args.timeout)
        current = None
        if args.offsets_command == "apply":
            current = apply(flow, result.rows, args.execute, args.timeout)
    except FailoverError as exc:
        return _error(str(exc))
    for note in result.notes:
        print(f"mm2py: note: {note}", file=sys.stderr)
    _print(result.rows, current, getattr(args, "execute", False), args.json)
    return 0


def _error(message: str) -> int:
    print(f"mm2py: error: {message}", file=sys.stderr)
    return 2


def _print(
    rows: Sequence[Row], current: dict[str, dict[TopicPartition, GroupOffset]] | None, execute: bool,
    as_json: bool,
) -> None:
    def now(r: Row) -> int | None:
        got = (current or {}).get(r.group, {}).get(r.target_partition)
        return None if got is None else got.offset

    if as_json:
        docs = []
        for r in rows:
            doc: dict[str, Any] = asdict(r)
            if current is not None:
                doc.update(current_target_offset=now(r), committed=execute)
            docs.append(doc)
        print(json.dumps(docs, indent=2))
        return
    header = ["GROUP", "TOPIC", "PARTITION", "SOURCE OFFSET", "TARGET TOPIC", "TARGET OFFSET", "VIA"]
    table = [[r.group, r.topic, str(r.partition), str(r.source_offset), r.target_topic,
              str(r.target_offset), r.via] for r in rows]
    if current is not None:
        header.insert(5, "CURRENT")
        for line, r in zip(table, rows, strict=True):
            line.insert(5, "-" if now(r) is None else str(now(r)))
    widths = [max(len(x) for x in col) for col in zip(header, *table, strict=False)]
    for line in [header, *table]:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    if current is not None:
        print("committed to the target" if execute else "dry run: nothing committed (add --execute)")
