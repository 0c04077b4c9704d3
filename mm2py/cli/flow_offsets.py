"""``mm2py flow-offsets``: read or reset a flow's committed source positions, straight on the clusters.

The same as ``GET/PATCH/DELETE /flows/{name}/offsets`` (KIP-875's idea for MM2's
source connector) for when no worker runs: ``get`` prints each source partition's position (the
next offset to mirror) and the target offset it maps to; ``reset`` moves chosen partitions to an
offset, ``earliest`` or ``latest``, or forgets positions (the partitions then start as never
mirrored). ``--name`` picks one of the pair's named flows (their positions are kept apart, keyed
by the flow's name). A reset is a dry run unless ``--execute``. This command cannot see workers: run it only
while no worker runs the flow (or the flow is stopped), or the worker's next commit overwrites it.

``repair`` moves every key of the pair's progress topic into the partition Kafka Connect gives it
(an older mm2py partitioned it otherwise, so MM2 could read a stale position; see
``mm2py/stores/progress_repair.py``): a dry run unless ``--execute``; stop every flow that uses the
topic first, mm2py's and MM2's.

``import`` moves a mirror from Kafka Connect (Strimzi) to mm2py: it reads the source connector's
positions from the Connect cluster's offsets topic on the target (a Strimzi resource names both;
``--from-topic``/``--connector`` otherwise) and writes them as the flow's, as ``reset`` does
(:mod:`mm2py.operations.connect_import`): a dry run unless ``--execute``; stop the connector first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from dataclasses import asdict
from typing import Any

from mm2py.config.errors import ConfigError
from mm2py.config.models import FlowConfig, load_config
from mm2py.operations.connect_import import import_offsets, import_source
from mm2py.operations.flow_offsets import PartitionOffset, Reset, read_offsets, reset_offsets
from mm2py.protocol.connect_offsets import progress_topic
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.stores.progress_repair import repair

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Adds ``flow-offsets get``, ``reset``, ``repair`` and ``import`` to the ``mm2py`` command line."""
    from mm2py.cli.run import add_secrets_dir

    cmd = sub.add_parser("flow-offsets", help="read or reset a flow's committed source positions")
    commands = cmd.add_subparsers(dest="flow_offsets_command", required=True)
    get = commands.add_parser("get", help="print each source partition's position and target offset")
    reset = commands.add_parser(
        "reset", help="move or forget positions (dry run unless --execute; only while no worker runs "
                      "the flow)")
    repair = commands.add_parser(
        "repair", help="move every progress record to the partition MM2 reads it from (dry run unless "
                       "--execute; only while no mirror, mm2py or MM2, runs the pair)")
    repair.add_argument("--execute", action="store_true", help="write and delete (without it: dry run)")
    imp = commands.add_parser(
        "import", help="read a Kafka Connect (Strimzi) MirrorSourceConnector's positions into the flow's "
                       "(dry run unless --execute; only once the connector is stopped)")
    imp.add_argument("--from-topic", help="the Connect cluster's offsets topic on the target (default, "
                                          "for a Strimzi resource: its offset storage topic)")
    imp.add_argument("--connector", help="the source connector's name (default, for a Strimzi resource: "
                                         "<source>-><target>.MirrorSourceConnector)")
    imp.add_argument("--execute", action="store_true", help="write (without it: dry run)")
    for c in (get, reset, repair, imp):
        add_secrets_dir(c)
        c.add_argument("--config", "-c", required=True, help="mm2.properties, YAML or JSON")
        c.add_argument("--flow", required=True, help="source->target, e.g. east->west")
        c.add_argument("--name", help="a named flow of that pair (a Connect connector's name, e.g. "
                                      "mirror-east-west-fast); without it, the pair's unnamed flow")
        c.add_argument("--json", action="store_true", help="print JSON instead of a table")
        c.set_defaults(func=run)
    reset.add_argument("--partition", "-p", action="append", default=[], metavar="TOPIC:N",
                       help="a source partition to reset (repeatable)")
    what = reset.add_mutually_exclusive_group(required=True)
    what.add_argument("--to", help="earliest, latest, or the next source offset to mirror")
    what.add_argument("--forget", action="store_true",
                      help="forget the partitions' positions (they start as never mirrored)")
    what.add_argument("--all", action="store_true", help="forget every position of the flow")
    reset.add_argument("--execute", action="store_true", help="write (without it: dry run)")


def _partition(text: str) -> TopicPartition:
    topic, sep, number = text.rpartition(":")
    if not sep or not topic or not number.isdigit():
        raise ConfigError(f"--partition expects TOPIC:N, got {text!r}", "--partition")
    return TopicPartition(topic, int(number))


def _target(text: str) -> Reset:
    if text in ("earliest", "latest"):
        return text  # type: ignore[return-value]
    if not text.isdigit():
        raise ConfigError(f"--to expects earliest, latest or an offset, got {text!r}", "--to")
    return int(text)


def _changes(args: argparse.Namespace) -> dict[TopicPartition, Reset | None] | None:
    if args.all:
        if args.partition:
            raise ConfigError("--all forgets every position: give no --partition with it", "--all")
        return None
    if not args.partition:
        raise ConfigError("name the partitions to reset with --partition TOPIC:N (or use --all)",
                          "--partition")
    to = None if args.forget else _target(args.to)
    return {_partition(p): to for p in args.partition}


def run(args: argparse.Namespace) -> int:
    logging.getLogger("mm2py.librdkafka").setLevel(logging.CRITICAL)
    if args.flow.count("->") != 1:
        raise ConfigError(f"--flow must look like source->target, got {args.flow!r}", "--flow")
    source, target = (part.strip() for part in args.flow.split("->"))
    flow = load_config(args.config, args.secrets_dir).flow(source, target)
    if args.name:  # its positions are keyed by its name; the pair's replication policy names targets
        flow = flow.named(args.name, {})
    if args.flow_offsets_command == "repair":
        return _repair(flow, args.execute, args.json)
    if args.flow_offsets_command == "get":
        rows = asyncio.run(read_offsets(flow))
        _print(rows, args.json)
        return 0
    if args.flow_offsets_command == "import":
        where = import_source(args.config, flow, args.from_topic, args.connector)
        print(f"importing {where.connector}'s positions for '{flow.source}' from {where.topic} on "
              f"'{flow.target}'", file=sys.stderr)
        rows = asyncio.run(import_offsets(flow, where, execute=args.execute))
    else:
        rows = asyncio.run(reset_offsets(flow, _changes(args), execute=args.execute))
    _print(rows, args.json)
    if not args.execute:
        print("dry run: nothing written (add --execute; only while no worker runs the flow)", file=sys.stderr)
    return 0


def _repair(flow: FlowConfig, execute: bool, as_json: bool) -> int:
    admin = ClusterAdmin.for_cluster(flow, "target")
    report = repair(admin, progress_topic(flow.source), dry_run=not execute)
    if as_json:
        print(json.dumps(asdict(report), indent=2))
    else:
        print(f"{report.topic}: {report.keys} keys in {report.partitions} partitions, {report.strays} "
              f"outside their partition; {report.written} records to write, partitions to empty below "
              f"their end: {', '.join(map(str, report.emptied)) or 'none'}")
    if not execute and report.strays:
        print("dry run: nothing written (add --execute; only while no mirror runs the pair)", file=sys.stderr)
    return 0


def _print(rows: list[PartitionOffset], as_json: bool) -> None:
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return

    def text(value: int | None) -> str:
        return "-" if value is None else str(value)

    header = ["TOPIC", "PARTITION", "POSITION", "TARGET TOPIC", "TARGET OFFSET"]
    table = [[r.topic, str(r.partition), text(r.position), r.target_topic, text(r.target_offset)]
             for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *table, strict=False)]
    for line in [header, *table]:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
