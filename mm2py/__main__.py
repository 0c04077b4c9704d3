"""``python -m mm2py``: the ``mm2py`` command, for a Python whose scripts directory is not on PATH."""

from mm2py.command import main

if __name__ == "__main__":
    raise SystemExit(main())
