"""The ``mm2py`` command's entry (``[project.scripts]``, ``python -m mm2py``) and ``make demo``'s
(:func:`demo`): Ctrl-C's policy (:mod:`mm2py.interrupts`) is installed before the command's modules
are imported, so an interrupt while they load ends the command quietly (status 130) instead of
with a traceback."""

from __future__ import annotations

from mm2py import interrupts


def _command() -> int:
    from mm2py.cli import main  # the heavy imports start here, under the policy

    return main()


def main() -> int:
    return interrupts.leave(interrupts.guarded(_command))


def _demo() -> int:
    from mm2py.cli.demo import main as demo_main  # clusters, clients, the worker: under the policy

    return demo_main()


def demo() -> int:
    """``make demo`` (``python -c 'from mm2py.command import demo; ...'``)."""
    return interrupts.leave(interrupts.guarded(_demo))
