"""``python -m mm2py.cli``: the ``mm2py`` command (as ``python -m mm2py``, which enters through
:mod:`mm2py.command`)."""

import sys

from mm2py import interrupts
from mm2py.cli import main

if __name__ == "__main__":
    sys.exit(interrupts.leave(interrupts.guarded(main)))
