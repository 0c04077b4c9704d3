"""``mm2py dev up|down|status``: local Kafka clusters for trying mm2py out
(:mod:`mm2py.kafka_local`)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Adds ``dev`` to the ``mm2py`` command line."""
    cmd = sub.add_parser("dev", help="local Kafka clusters for trying mm2py out")
    cmd.add_argument("dev_command", choices=["up", "down", "status"])
    cmd.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mm2py.kafka_local import dev

    if args.dev_command == "up":
        already = [s for s in dev.status() if s.running]
        clusters = dev.up()
        word = "already running" if already else "started"
        print(f"dev clusters {word}:")
        for c in clusters:
            print(f"  {c.name:6} bootstrap.servers={c.bootstrap}")
        return 0
    if args.dev_command == "down":
        names = dev.down()
        print("stopped: " + (", ".join(names) if names else "nothing was running"))
        return 0
    rows = dev.status()
    if not rows:
        print("no dev clusters (run `mm2py dev up`)")
        return 1
    for row in rows:
        print(row.line())
    return 0 if all(r.running and r.reachable for r in rows) else 1
