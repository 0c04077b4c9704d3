"""``mm2py offsets``: move consumers between the clusters of a flow, either way.

* ``translate`` / ``apply``: consumer groups. ``--direction forward`` (the default, failover): where
  each group, as committed on the source, resumes on the target (``mm2py/operations/failover.py``).
  ``--direction back`` (failback): where each group, as committed on the target, resumes on the
  source (``mm2py/operations/failback.py``). ``apply`` commits on the cluster the groups move to,
  only with ``--execute`` and only while the group has no members there.
* ``translate-offset``: one offset of one partition, either way.
* ``rewrite``: offsets kept outside Kafka — a JSON ``{topic: {partition: offset}}`` map, or a Spark
  Structured Streaming checkpoint — rewritten for the other cluster
  (``mm2py/operations/offsets_rewrite.py``).

Errors are one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mm2py.config.models import FlowConfig, load_config
from mm2py.engine.translation import Direction, TranslationError
from mm2py.operations.failback import translate_back
from mm2py.operations.failover import FailoverError, Row, apply, check_topic_regex, translate
from mm2py.operations.offsets_rewrite import load_json_map, rewrite_json_map, rewrite_spark_checkpoint
from mm2py.operations.translator import FlowTranslator
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import GroupOffset

__all__ = ["add_parser"]

_DIRECTION_HELP = ("forward (default): source -> target, failover; "
                   "back: target -> source, failback (e.g. east.orders on west -> orders on east)")


def add_parser(sub: Any) -> None:
    """Adds ``offsets translate|apply|translate-offset|rewrite`` to the ``mm2py`` command line."""
    offsets = sub.add_parser(
        "offsets", help="move consumer offsets between a flow's clusters (failover and failback)")
    commands = offsets.add_subparsers(dest="offsets_command", required=True)
    for name, text in (
        ("translate", "print where each group resumes on the other cluster"),
        ("apply", "commit the translated offsets to the groups there (dry run unless --execute)"),
    ):
        cmd = commands.add_parser(name, help=text, description=text + ". --direction back moves groups "
                                  "that consumed on the target back to the source.")
        _common(cmd)
        cmd.add_argument("--group", "-g", action="append", required=True, help="consumer group (repeatable)")
        cmd.add_argument("--topic-regex", help="only source topics matching this regular expression")
        cmd.add_argument("--json", action="store_true", help="print JSON instead of a table")
        if name == "apply":
            cmd.add_argument("--execute", action="store_true", help="commit (without it: dry run)")
        cmd.set_defaults(func=run_groups)
    one = commands.add_parser("translate-offset", help="translate one offset of one partition",
                              description="Translate one offset exactly, either way.")
    _common(one)
    one.add_argument("--topic", required=True,
                     help="the topic on the cluster the offset is from (orders forward, east.orders back)")
    one.add_argument("--partition", type=_non_negative, required=True)
    one.add_argument("--offset", type=_non_negative, required=True, help="the next offset to read")
    one.add_argument("--json", action="store_true", help="print JSON")
    one.set_defaults(func=run_one)
    rw = commands.add_parser(
        "rewrite", help="rewrite offsets kept outside Kafka for the other cluster",
        description="Rewrite a JSON {topic: {partition: offset}} map, or a Spark Structured Streaming "
                    "checkpoint into a new directory, for the other cluster: topics renamed, offsets "
                    "translated exactly.")
    _common(rw)
    what = rw.add_mutually_exclusive_group(required=True)
    what.add_argument("--json-map", metavar="FILE", help="a JSON offsets map ('-': stdin)")
    what.add_argument("--spark-checkpoint", metavar="DIR", help="a Structured Streaming checkpoint directory")
    rw.add_argument("--output", "-o", metavar="PATH",
                    help="where to write: a file for --json-map (default stdout), a new directory for "
                         "--spark-checkpoint (required)")
    rw.set_defaults(func=run_rewrite)


def _common(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--config", "-c", required=True, help="mm2.properties, YAML or JSON")
    cmd.add_argument("--flow", required=True, help="source->target, e.g. east->west")
    cmd.add_argument("--direction", choices=[d.value for d in Direction], default="forward",
                     help=_DIRECTION_HELP)
    cmd.add_argument("--timeout", type=float, default=30.0, help="seconds per cluster call (default 30)")


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _flow(args: argparse.Namespace) -> FlowConfig | None:
    # librdkafka reports every refused connection; the errors that matter are raised and shown once
    logging.getLogger("mm2py.librdkafka").setLevel(logging.CRITICAL)
    if args.flow.count("->") != 1:
        _error(f"--flow must look like source->target, got {args.flow!r}")
        return None
    source, target = (part.strip() for part in args.flow.split("->"))
    return load_config(args.config).flow(source, target)


def run_groups(args: argparse.Namespace) -> int:
    flow = _flow(args)
    if flow is None:
        return 2
    check_topic_regex(args.topic_regex, "--topic-regex")
    back = args.direction == Direction.BACK.value
    groups = list(dict.fromkeys(args.group))
    try:
        result = (translate_back if back else translate)(flow, groups, args.topic_regex, args.timeout)
        current = None
        if args.offsets_command == "apply":
            current = apply(flow, result.rows, args.execute, args.timeout)
    except FailoverError as exc:
        return _error(str(exc))
    for note in result.notes:
        print(f"mm2py: note: {note}", file=sys.stderr)
    _print(result.rows, current, getattr(args, "execute", False), args.json, back)
    if current is not None and not args.json:
        where = flow.source if back else flow.target
        print(f"committed on '{where}'" if args.execute else "dry run: nothing committed (add --execute)")
    return 0


def run_one(args: argparse.Namespace) -> int:
    flow = _flow(args)
    if flow is None:
        return 2
    direction = Direction(args.direction)
    try:
        translator = FlowTranslator.read(flow, args.timeout)
        t = translator.translate(args.topic, args.partition, args.offset, direction)
    except TranslationError as exc:
        return _error(str(exc))
    if args.json:
        print(json.dumps({"flow": flow.name, **asdict(t), "direction": t.direction.value}, indent=2))
    elif direction is Direction.FORWARD:
        print(f"{t.source_topic}-{t.partition} {t.source_offset} on '{flow.source}' -> "
              f"{t.target_topic}-{t.partition} {t.target_offset} on '{flow.target}'")
    else:
        print(f"{t.target_topic}-{t.partition} {t.target_offset} on '{flow.target}' -> "
              f"{t.source_topic}-{t.partition} {t.source_offset} on '{flow.source}'")
    return 0


def run_rewrite(args: argparse.Namespace) -> int:
    flow = _flow(args)
    if flow is None:
        return 2
    direction = Direction(args.direction)
    if args.spark_checkpoint and not args.output:
        return _error("--spark-checkpoint needs --output, a new directory for the rewritten checkpoint")
    try:
        if args.json_map:
            text = sys.stdin.read() if args.json_map == "-" else Path(args.json_map).read_text()
            doc = load_json_map(text)
            moved = rewrite_json_map(FlowTranslator.read(flow, args.timeout), doc, direction)
            out = json.dumps(moved, indent=2) + "\n"
            if args.output and args.output != "-":
                Path(args.output).write_text(out)
            else:
                sys.stdout.write(out)
            return 0
        done = rewrite_spark_checkpoint(FlowTranslator.read(flow, args.timeout), Path(args.spark_checkpoint),
                                        Path(args.output), direction)
    except FailoverError as exc:
        return _error(str(exc))
    for note in done.notes:
        print(f"mm2py: note: {note}", file=sys.stderr)
    print(f"{args.output}: offsets of batches {', '.join(map(str, sorted(done.batches)))} rewritten"
          + (f"; initial offsets {', '.join(done.initial)}" if done.initial else ""))
    return 0


def _error(message: str) -> int:
    print(f"mm2py: error: {message}", file=sys.stderr)
    return 2


def _print(
    rows: Sequence[Row], current: dict[str, dict[TopicPartition, GroupOffset]] | None, execute: bool,
    as_json: bool, back: bool,
) -> None:
    def now(r: Row) -> int | None:
        got = (current or {}).get(r.group, {}).get(r.destination()[0])
        return None if got is None else got.offset

    if as_json:
        docs = []
        for r in rows:
            doc: dict[str, Any] = asdict(r)
            if current is not None:
                key = "current_source_offset" if back else "current_target_offset"
                doc.update({key: now(r), "committed": execute})
            docs.append(doc)
        print(json.dumps(docs, indent=2))
        return
    if back:  # from the target to the source
        header = ["GROUP", "TARGET TOPIC", "PARTITION", "TARGET OFFSET", "TOPIC", "SOURCE OFFSET", "VIA"]
        table = [[r.group, r.target_topic, str(r.partition), str(r.target_offset), r.topic,
                  str(r.source_offset), r.via] for r in rows]
    else:
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
