"""The SparkSession the Spark runtime uses: embedded local mode by default, any master on request.

Kept quiet (log level WARN, no UI, no console progress bar) and quick to start. Settings that
the mirror's guarantees depend on are fixed: speculative execution would run a task twice at the
same time (two writers to one target partition), so it is refused; a failed Spark task is not
retried by Spark (the driver retries at the next round, from the committed progress).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mm2py

#: settings the user may override
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.python.worker.reuse": "true",
    "spark.task.maxFailures": "1",
    # executors' Python workers fork with the task code imported (see mm2py.runtime.spark.daemon)
    "spark.python.daemon.module": "mm2py.runtime.spark.daemon",
}
#: settings the mirror depends on
FIXED_CONF: dict[str, str] = {"spark.speculation": "false"}

_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
"""


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def runs_here(master: str) -> bool:
    """True for masters whose executors run on this machine: ``local[...]``, or a standalone
    master on loopback (``spark://127.0.0.1:7077``, ``spark://localhost:7077``)."""
    if is_local(master):
        return True
    if not master.startswith("spark://"):
        return False
    hosts = [address.rsplit(":", 1)[0] for address in master[len("spark://"):].split(",")]
    return all(host in ("127.0.0.1", "localhost", "[::1]") for host in hosts)


def default_master(tasks: int) -> str:
    """``local[N]``: one slot per task, so that every task of a round runs at once."""
    return f"local[{max(1, min(tasks, 4 * (os.cpu_count() or 1)))}]"


def _log4j_file() -> str:
    path = Path(tempfile.gettempdir()) / "mm2py-spark-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J:
        path.write_text(_LOG4J)
    return str(path)


def session_conf(master: str | None, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings for ``master`` (None: the one spark-submit passed) plus ``conf``."""
    settings = dict(DEFAULT_CONF)
    settings.update(conf or {})
    for key, value in FIXED_CONF.items():
        if settings.get(key, value) != value:
            raise ValueError(f"{key}={settings[key]} is not supported: the mirror needs {key}={value}")
        settings[key] = value
    if master is not None:
        settings["spark.master"] = master
    if master is not None and runs_here(master):
        # executors are Python processes on this machine: same interpreter, same mm2py sources
        root = str(Path(mm2py.__file__).resolve().parents[1])  # the checkout or site-packages
        paths = list(dict.fromkeys([root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
        settings.setdefault("spark.pyspark.python", sys.executable)
        settings.setdefault("spark.executorEnv.PYTHONPATH", os.pathsep.join(paths))
        settings.setdefault("spark.driver.host", "127.0.0.1")
        settings.setdefault("spark.driver.bindAddress", "127.0.0.1")
    # the driver's JVM (started by pyspark unless spark-submit started it) logs warnings only
    settings.setdefault("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_log4j_file()}")
    return settings


def _quick_jvms(settings: dict[str, str], master: str | None) -> None:
    """The JVMs that only coordinate start quick (:func:`coordinator_java_options`): the driver's,
    and the executors' where they run on this machine (the archive is a file here). Here rather
    than in :func:`session_conf`: an archive's recording is claimed for the JVM about to start."""
    if "spark.driver.defaultJavaOptions" not in settings:
        settings["spark.driver.defaultJavaOptions"] = coordinator_java_options("spark-driver")
    if master is not None and runs_here(master) and "spark.executor.defaultJavaOptions" not in settings:
        settings["spark.executor.defaultJavaOptions"] = coordinator_java_options("spark-executor")


def coordinator_java_options(role: str) -> str:
    """JVM options for Spark's JVMs under this runtime: C1 only, and the role's class-data archive
    (``mm2py.kafka_local.class_archive``: recorded by the first such JVM's exit, mapped by every later
    one; a JVM whose class path does not match runs without it). The mirror's bytes never pass
    through these JVMs (a mirror host is a Python process; the JVMs schedule it and carry its
    reports), so start-up is what their speed is for: on a 2-core machine the driver's session came
    up in 2.4 s instead of 5.5-7 (``benchmarks/README.md``, "Spark start-up"), and under the load of
    a 2,000-partition start the first record came that much sooner. ``MM2PY_CLASS_ARCHIVE=0`` leaves
    the archive out."""
    import pyspark

    from mm2py.kafka_local.class_archive import class_archive_args
    from mm2py.kafka_local.jars import QUICK_JVM

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    archive = class_archive_args(role, jars) if jars.is_dir() else []
    # the recording JVM warns of every class it cannot archive (hundreds of lines in the command's
    # output): class-data sharing's log goes nowhere
    return " ".join([QUICK_JVM, *(a for a in archive if not a.startswith("-Xlog:cds*=warning"))])


def spark_session(
    master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "mm2py"
) -> Any:
    """Start (or join) the SparkSession. ``master=None`` uses spark-submit's master when launched by
    spark-submit, else embedded ``local[2]``."""
    from pyspark.sql import SparkSession  # imported here: pyspark is only needed by this runtime

    logging.getLogger("py4j").setLevel(logging.WARNING)  # one INFO line per gateway connection

    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = default_master(2)
    if master is not None and runs_here(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    settings = session_conf(master, conf)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # else spark-submit started the driver's JVM
        _quick_jvms(settings, master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def end_driver_jvm(timeout: float = 30.0) -> None:
    """End the driver's JVM that pyspark started for this process, and wait for it (at most
    ``timeout`` s): for a command about to exit. The JVM ends by itself once the process is gone,
    but what kills the process's group then (a supervisor, a benchmark) would cut short the class
    archive a first driver writes as it exits (:func:`coordinator_java_options`). Nothing to do when
    spark-submit started the JVM."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return
    with contextlib.suppress(OSError):
        proc.stdin.close()  # pyspark's gateway server exits at the end of its standard input
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout)


def job_error(exc: BaseException) -> str:
    """One line saying why a Spark job failed (a Py4JJavaError's first line names only the call)."""
    lines = [line.strip(" :") for line in str(exc).splitlines()]
    aborted = next((line for line in lines if "Job aborted" in line), None)
    if aborted is not None:
        return aborted.split("most recent failure: ", 1)[-1][:500]
    return f"{type(exc).__name__}: {next((line for line in lines if line), '')}"[:500]
