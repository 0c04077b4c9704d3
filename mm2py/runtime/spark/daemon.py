"""Spark's Python daemon on mm2py's executors: pyspark's own, with the mirror task code imported once.

Spark starts one daemon per executor (``python -m <spark.python.daemon.module>``) and forks a
Python worker from it for each Spark task. With pyspark's daemon every fork imports mm2py's task
code again when it unpickles the lease's function: ~1.5 s of a quiet 2-core machine before a lease
can say HELLO or build its task, many seconds on a busy one, paid by every lease, by a successor
and by the lease that replaces one on a lost executor. Forked from this module, a worker starts
with it imported. :mod:`.driver.session` sets ``spark.python.daemon.module`` to this module.

Importing only: no thread, socket or event loop exists before the fork, and nothing is written to
standard output, which carries the daemon's port to Spark.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import zipfile


def _prefer_installed_pyspark() -> None:
    """Import pyspark and py4j from this interpreter's installation when it holds the versions
    Spark zipped onto the executors' PYTHONPATH: Python compiles a zipped module from source at
    every import (no bytecode is cached for a zip), ~1 CPU s of each daemon's start-up here."""
    zips = {os.path.basename(p): p for p in sys.path if p.endswith(".zip")}
    zipped = zips.get("pyspark.zip")
    py4j = next((name for name in zips if name.startswith("py4j-") and name.endswith("-src.zip")), None)
    if zipped is None or py4j is None:
        return
    try:
        with zipfile.ZipFile(zipped) as z:
            version_py = z.read("pyspark/version.py").decode()
        same = (f"'{importlib.metadata.version('pyspark')}'" in version_py
                and py4j == f"py4j-{importlib.metadata.version('py4j')}-src.zip")
    except (OSError, KeyError, zipfile.BadZipFile, importlib.metadata.PackageNotFoundError):
        return
    if same:
        sys.path[:] = [p for p in sys.path if p not in (zipped, zips[py4j])]


_prefer_installed_pyspark()
# kio registers strategies for its types when hypothesis (a test library) can be imported, ~0.4 s
# of imports; no executor draws examples
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

import mm2py.connectors.mirror_task  # noqa: E402
import mm2py.runtime.spark.executor.lease  # noqa: E402
import mm2py.runtime.spark.executor.round  # noqa: E402, F401

if __name__ == "__main__":
    from pyspark.daemon import manager

    manager()
