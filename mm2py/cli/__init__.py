"""The ``mm2py`` command line: the argparse tree and the command's entry (:func:`main`), one module
per command: ``run.py`` (``mm2py run``), ``dev.py`` (``mm2py dev``), ``offsets.py`` (``mm2py
offsets``), ``flow_offsets.py`` (``mm2py flow-offsets``), ``audit.py`` (``mm2py audit``); and
``demo.py`` (``make demo``). ``python -m mm2py.cli`` runs the command (``__main__.py``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mm2py import interrupts

#: ``mm2py --help``'s first words
DESCRIPTION = "The `mm2py` command line."


def build_parser() -> argparse.ArgumentParser:
    """The ``mm2py`` command line: each command adds its own parser (imported here: ``mm2py.cli``
    alone loads none of them)."""
    from mm2py.cli import audit, dev, flow_offsets, offsets, run

    parser = argparse.ArgumentParser(prog="mm2py", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (dev, run, offsets, flow_offsets, audit):
        command.add_parser(sub)
    return parser


def _import_kio_without_test_strategies() -> None:
    """Import ``kio`` with ``hypothesis`` hidden. When hypothesis (a test dependency) is installed,
    kio registers test-data strategies for its types at import: about a quarter of a second of
    every command's start-up, for nothing a command uses. A process that has imported either
    already (a test calling :func:`main`) is left as it is."""
    if "hypothesis" in sys.modules or "kio" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # `import hypothesis` raises ImportError
    try:
        import kio.static.primitive  # noqa: F401  (its _phantom looks for hypothesis)
    finally:
        del sys.modules["hypothesis"]


def main(argv: Sequence[str] | None = None) -> int:
    """The command: its exit status. A Ctrl-C while it loads or runs any command but ``run``'s
    worker unwinds it: 130, no traceback (:mod:`mm2py.interrupts`)."""
    with interrupts.handling():
        try:
            return _main(argv)
        except KeyboardInterrupt:
            return interrupts.interrupted_status()


def _main(argv: Sequence[str] | None) -> int:
    _import_kio_without_test_strategies()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except Exception as exc:  # a clear one-line error, not a traceback, for users
        from mm2py.errors import Mm2pyError

        if isinstance(exc, Mm2pyError | OSError):
            print(f"mm2py: error: {exc}", file=sys.stderr)
            return 2
        raise
