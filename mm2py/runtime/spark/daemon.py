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

import mm2py.connectors.mirror_task
import mm2py.runtime.spark.executor.lease
import mm2py.runtime.spark.executor.round  # noqa: F401

if __name__ == "__main__":
    from pyspark.daemon import manager

    manager()
