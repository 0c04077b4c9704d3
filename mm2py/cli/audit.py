"""``mm2py audit``: compare a flow's source and target partitions, on demand.

Reads both clusters with mm2py's raw client and compares every partition the flow mirrors with its
remote partition from an anchor on (an offset sync or a stored position): batch by batch where the
mirror passed the batches through, record by record where it did not (see
``mm2py/engine/audit/``). Prints progress on stderr, a table on stdout and, with ``--json PATH``,
the whole report. Exit status: 0 when every partition agrees, 1 when one disagrees (a mismatch, or
target records tied to no source offset), 2 when the audit could not run (a bad configuration, an
unreachable cluster) or could not read a partition to its end.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from mm2py.config.errors import ConfigError

if TYPE_CHECKING:  # imported when the command runs: `mm2py --help` and the other commands skip them
    from mm2py.config.models import FlowConfig, MirrorMakerConfig
    from mm2py.operations.audit import Progress

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Adds ``audit`` to the ``mm2py`` command line."""
    cmd = sub.add_parser("audit", help="compare a flow's source and target partitions (exit 0: they agree)")
    cmd.add_argument("--config", "-c", required=True, help="mm2.properties, YAML or JSON")
    cmd.add_argument("--flow", help="source->target, e.g. east->west (default: the only enabled flow)")
    cmd.add_argument("--name", help="a named flow of that pair (its stored positions are under its name)")
    cmd.add_argument("--topics", metavar="REGEX",
                     help="only the source topics whose whole name this regular expression matches")
    cmd.add_argument("--json", dest="json_path", metavar="PATH", help="write the report as JSON to PATH")
    cmd.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    cmd.set_defaults(func=run)


def pick_flow(config: MirrorMakerConfig, pair: str | None, name: str | None) -> FlowConfig:
    """The flow ``--flow`` (and ``--name``) names, or the configuration's only enabled flow."""
    if pair is None:
        enabled = config.enabled_flows()
        if len(enabled) != 1:
            which = ", ".join(f.name for f in enabled) or "none"
            raise ConfigError(f"name the flow to audit with --flow source->target (enabled flows: {which})",
                              "--flow")
        flow = enabled[0]
    else:
        if pair.count("->") != 1:
            raise ConfigError(f"--flow must look like source->target, got {pair!r}", "--flow")
        source, target = (part.strip() for part in pair.split("->"))
        flow = config.flow(source, target)
    return flow.named(name, {}) if name else flow


def _pattern(text: str | None) -> re.Pattern[str] | None:
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise ConfigError(f"--topics is no regular expression: {exc}", "--topics") from None


class ProgressLine:
    """Progress on stderr: rewritten in place on a terminal (every 0.2 s), a line every 5 s otherwise."""

    def __init__(self, stream: TextIO, flow: str) -> None:
        self.stream, self.flow = stream, flow
        self.tty = stream.isatty()
        self._next = 0.0

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        final = p.done == p.partitions
        if now < self._next and not final:
            return
        self._next = now + (0.2 if self.tty else 5.0)
        rate = p.source_bytes / 1e6 / max(p.seconds, 1e-6)
        line = (f"audit {self.flow}: {p.done}/{p.partitions} partitions done, "
                f"{p.source_bytes / 1e6:.1f} MB source / {p.target_bytes / 1e6:.1f} MB target read, "
                f"{rate:.0f} MB/s")
        self.stream.write(f"\r{line}\033[K" if self.tty else line + "\n")
        if self.tty and final:
            self.stream.write("\n")
        self.stream.flush()


def run(args: argparse.Namespace) -> int:
    from mm2py.config.models import load_config
    from mm2py.operations.audit import audit_flow, table

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    flow = pick_flow(load_config(args.config), args.flow, args.name)
    only = _pattern(args.topics)
    progress = None if args.quiet else ProgressLine(sys.stderr, flow.name)
    report = asyncio.run(audit_flow(flow, only, progress))
    print(table(report), flush=True)
    if args.json_path:
        Path(args.json_path).write_text(report.model_dump_json(indent=2) + "\n")
    return report.verdict.exit_code
