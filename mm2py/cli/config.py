"""``mm2py config explain FILE``: what a configuration file becomes, before it runs.

Any file ``mm2py run --config`` accepts (mm2.properties, mm2py's YAML or JSON, a Strimzi
``KafkaMirrorMaker2`` resource) is printed as the flat MM2 keys it amounts to, in mm2.properties form
(credentials shown as ``[hidden]``), then the flows it enables and, as comments, what mm2py leaves
aside and why: a resource's fields with no meaning here, and keys that are not flow settings.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

__all__ = ["add_parser", "explain"]


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ", ".join(_value(v) for v in value)
    return str(value)


def explain(path: str, secrets_dir: str | None, out: TextIO) -> int:
    from mm2py.config.models import load_config
    from mm2py.rest_api.shared import HIDDEN, is_secret

    config = load_config(path, secrets_dir)
    out.write(f"# {path} as mm2.properties (credentials shown as {HIDDEN})\n")
    for key, value in config.source_keys.items():
        out.write(f"{key} = {HIDDEN if is_secret(key) else _value(value)}\n")
    flows = [f.name for f in config.enabled_flows()]
    out.write(f"\n# flows enabled: {', '.join(flows) or 'none'}\n")
    if config.notes:
        out.write("# left aside:\n")
        out.writelines(f"#   {note}\n" for note in config.notes)
    if config.ignored_keys:
        out.write("# not flow or cluster settings (the worker's REST keys, or Kafka Connect's, which mm2py "
                  "does not use):\n")
        out.writelines(f"#   {key}\n" for key in config.ignored_keys)
    return 0


def _explain(args: argparse.Namespace) -> int:
    return explain(args.file, args.secrets_dir, sys.stdout)


def add_parser(sub: Any) -> None:
    """Adds ``config explain`` to the ``mm2py`` command line."""
    from mm2py.cli.run import add_secrets_dir

    cmd = sub.add_parser("config", help="what a configuration file becomes")
    verbs = cmd.add_subparsers(dest="verb", required=True)
    explain_cmd = verbs.add_parser(
        "explain", help="print a config file (mm2.properties, YAML, JSON or a Strimzi KafkaMirrorMaker2 "
                        "resource) as the mm2.properties it amounts to, with what is left aside and why")
    explain_cmd.add_argument("file")
    add_secrets_dir(explain_cmd)
    explain_cmd.set_defaults(func=_explain)
