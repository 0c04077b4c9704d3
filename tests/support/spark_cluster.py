"""Start and stop a Spark standalone cluster (one master, N workers) on loopback, for tests.

The daemons are the installed pyspark distribution's own ``Master`` and ``Worker`` classes,
launched through its ``bin/spark-class`` (nothing is downloaded). Everything binds to 127.0.0.1:
the master's RPC port and its web UI (whose ``/json/`` endpoint says which workers are alive) on
free ports, each worker's RPC port on a free port, their web UIs on ephemeral ports. Every
daemon has its own directory under the cluster's work dir, holding its log (``daemon.log``); a
worker's directory is also its Spark work dir, where its executors run and log
(``app-*/<executor>/stderr``).

Executors (and the Python workers they fork) run with their working directory inside their
worker's directory, which is how the harness finds them to kill them: ``kill_worker`` SIGKILLs a
worker with every process of its, and ``stop`` leaves no process of the cluster behind.

To try the Spark runtime on a standalone master by hand:
``python -m tests.support.spark_cluster`` runs one in the foreground until Ctrl-C and prints
its ``spark://`` URL for ``mm2py run --runtime spark --spark-master``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mm2py.kafka_local.class_archive import class_archive_args
from mm2py.kafka_local.cluster import free_port
from mm2py.kafka_local.jars import QUICK_JVM, HarnessError, cache_root

LOG4J2 = """\
rootLogger.level = info
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %c{1}: %m%n
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
"""

def driver_java_options() -> str:
    """JVM options for a test's Spark driver: C1 only, and the drivers' class-data archive (a Spark
    driver starts with half the CPU; see ``mm2py.kafka_local.class_archive``)."""
    return " ".join([QUICK_JVM, *class_archive_args("spark-driver", spark_home() / "jars")])


def executor_java_options() -> str:
    """JVM options for a test application's executors on a :class:`SparkStandaloneCluster`: C1 only,
    and the executors' class-data archive. Both executors of an application may record it at once:
    the JVM removes the file before it writes its own, so the last one to write owns it whole."""
    return " ".join([QUICK_JVM, *class_archive_args("spark-executor", spark_home() / "jars")])


def spark_home() -> Path:
    """The installed pyspark distribution (it holds ``bin/spark-class`` and ``jars/``)."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").exists() or not (home / "jars").is_dir():
        raise HarnessError(f"{home} is not a Spark distribution (no bin/spark-class or jars/)")
    return home


@dataclass
class SparkDaemon:
    """One master or worker JVM."""

    name: str
    workdir: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.workdir / "daemon.log"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, lines: int = 40) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


class SparkStandaloneCluster:
    """A Spark standalone master and ``workers`` workers on 127.0.0.1, ``cores`` cores and
    ``memory`` for executors each. Use as a context manager: ``start()`` returns once every worker
    is registered with the master; leaving the block stops the daemons and every executor and
    Python worker they started. ``master_url`` is what a driver connects to."""

    def __init__(
        self,
        workdir: Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        daemon_memory: str = "256m",
        java_options: str = QUICK_JVM,
    ) -> None:
        self.workdir = Path(workdir)
        self.cores = cores
        self.memory = memory
        self.daemon_memory = daemon_memory
        self.java_options = java_options
        self._env: dict[str, str] = {}
        self._spark_class = ""
        self.start_seconds = self.QUIET_START_SECONDS  # measured by start()
        self.ui_port = free_port()
        self.master = SparkDaemon("master", self.workdir / "master", free_port())
        self.workers = [
            SparkDaemon(f"worker-{i}", self.workdir / f"worker-{i}", free_port())
            for i in range(1, workers + 1)
        ]

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master.port}"

    @property
    def daemons(self) -> list[SparkDaemon]:
        return [self.master, *self.workers]

    def __str__(self) -> str:
        return f"Spark standalone {self.master_url} ({len(self.workers)} workers)"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> SparkStandaloneCluster:
        """Start the master, then the workers; return when every worker is ALIVE at the master.
        How long that took is :attr:`start_seconds`: this host's pace for JVMs (tests size their
        waits from it, :meth:`paced`)."""
        started = time.monotonic()
        home = spark_home()
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True)
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(LOG4J2)
        # the conf dir heads every daemon's and executor's class path: one that is empty and at the
        # same path in every run lets them map a class-data archive (the JVM archives no class path
        # holding a non-empty directory, and maps an archive only on the class path it was made on)
        conf = cache_root() / "spark-conf-empty"
        conf.mkdir(parents=True, exist_ok=True)
        daemon_options = [self.java_options, f"-Dlog4j2.configurationFile={log4j}",
                          *class_archive_args("spark-daemon", home / "jars")]
        # no spark-defaults.conf, spark-env.sh or PYTHONPATH: as on a real cluster, executors
        # import only what the driver's settings (spark.executorEnv.PYTHONPATH) point them at
        self._env = {k: v for k, v in os.environ.items()
                     if not k.startswith(("SPARK_", "PYSPARK_")) and k != "PYTHONPATH"}
        self._env.update({
            "SPARK_HOME": str(home),
            "SPARK_CONF_DIR": str(conf),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "SPARK_DAEMON_JAVA_OPTS": " ".join(daemon_options),
            "SPARK_LOCAL_DIRS": str(self.workdir / "scratch"),
            # finished applications' executor logs stay in the work dirs
            "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=false",
        })
        self._spark_class = str(home / "bin" / "spark-class")
        self._launch(self.master, [
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.master.port), "--webui-port", str(self.ui_port),
        ])
        self._wait(lambda: self.state() is not None, timeout, "the master to serve its status")
        for worker in self.workers:
            self._launch_worker(worker)
        self.wait_workers(len(self.workers), timeout)
        self.start_seconds = time.monotonic() - started
        return self

    #: about what :meth:`start` takes on a quiet 2-core machine of the kind the suite runs on (JVMs
    #: of a master and two workers, class-data archive mapped; 7.4-8.6 s measured under a load
    #: average of 6-10): the unit :meth:`paced` scales by
    QUIET_START_SECONDS = 5.0

    def paced(self, seconds: float) -> float:
        """A wait of ``seconds`` on a quiet machine, scaled by how much slower this cluster's own
        start was than :data:`QUIET_START_SECONDS` (never less than ``seconds``)."""
        return seconds * max(1.0, self.start_seconds / self.QUIET_START_SECONDS)

    def _launch_worker(self, worker: SparkDaemon) -> None:
        self._launch(worker, [
            "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--port", str(worker.port), "--webui-port", "0",
            "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(worker.workdir),
            self.master_url,
        ])

    def _launch(self, daemon: SparkDaemon, args: list[str]) -> None:
        daemon.workdir.mkdir(parents=True, exist_ok=True)
        out = open(daemon.log_file, "ab")  # noqa: SIM115 - owned by the child
        daemon.process = subprocess.Popen(
            [self._spark_class, *args], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=daemon.workdir, env=self._env, start_new_session=True,
        )
        out.close()

    def _wait(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            for daemon in self.daemons:
                if daemon.process is not None and not daemon.is_alive():
                    raise HarnessError(f"Spark {daemon.name} exited while waiting for {what}; "
                                       f"log {daemon.log_file}:\n{daemon.tail()}")
            if time.monotonic() > deadline:
                raise HarnessError(f"timed out after {timeout:.0f}s waiting for {what}; logs: "
                                   + ", ".join(str(d.log_file) for d in self.daemons))
            time.sleep(0.2)

    def state(self) -> dict[str, Any] | None:
        """The master's status (its web UI's ``/json/``), or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                state: dict[str, Any] = json.load(r)
                return state
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> list[str]:
        """Names (``worker-1``...) of the workers the master has registered and sees ALIVE."""
        state = self.state() or {}
        ports = {str(w["port"]) for w in state.get("workers", []) if w.get("state") == "ALIVE"}
        return [w.name for w in self.workers if str(w.port) in ports]

    def wait_workers(self, count: int, timeout: float = 60.0) -> None:
        """Block until exactly ``count`` workers are ALIVE at the master."""
        self._wait(lambda: len(self.alive_workers()) == count, timeout, f"{count} alive Spark workers")

    def worker_processes(self, name: str) -> list[int]:
        """The pids of a worker and of every process it started (executors, Python workers)."""
        worker = self._worker(name)
        return sorted(_tree(_own_pid(worker), worker.workdir))

    def _worker(self, name: str) -> SparkDaemon:
        for worker in self.workers:
            if worker.name == name:
                return worker
        raise HarnessError(f"no Spark worker {name!r} (there are {[w.name for w in self.workers]})")

    def kill_worker(self, name: str) -> list[int]:
        """SIGKILL one worker together with its executors and their Python workers (all at once,
        as when its host fails); returns the pids killed. The master notices the lost connection;
        ``restart_worker`` brings the worker back."""
        worker = self._worker(name)
        killed = _kill_tree(_own_pid(worker), worker.workdir)
        if worker.process is not None:
            worker.process.wait(30)
            worker.process = None
        return killed

    def restart_worker(self, name: str, timeout: float = 60.0) -> None:
        """Start a killed (or exited) worker again, on a new port; return once it is ALIVE."""
        worker = self._worker(name)
        if worker.is_alive():
            return
        worker.process = None
        worker.port = free_port()  # the master may still list the dead worker at the old address
        self._launch_worker(worker)
        self._wait(lambda: name in self.alive_workers(), timeout, f"{name} to register again")

    def restore(self, timeout: float | None = None) -> None:
        """Restart every worker that is not running; return once all are ALIVE at the master
        (within ``timeout``, by default a minute at this cluster's pace)."""
        timeout = self.paced(60.0) if timeout is None else timeout
        for worker in self.workers:
            if not worker.is_alive():
                self.restart_worker(worker.name, timeout)
        self.wait_workers(len(self.workers), timeout)

    # -- applications --------------------------------------------------------------------------
    def active_apps(self) -> list[dict[str, Any]]:
        """The applications (drivers) the master runs now: ``id``, ``name``, ``cores``, ``state``..."""
        return list((self.state() or {}).get("activeapps", []))

    def executor_logs(self, app_id: str) -> dict[str, list[Path]]:
        """The stderr logs of ``app_id``'s executors, by worker name (executors log INFO there)."""
        return {w.name: sorted((w.workdir / app_id).glob("*/stderr")) for w in self.workers}

    def worker_running(self, app_id: str, pid: int) -> str | None:
        """The worker on which process ``pid`` works for ``app_id``'s executors (None: no worker's)."""
        return next((w.name for w in self.workers if pid in _tree(None, w.workdir / app_id)), None)

    def app_processes(self, app_id: str) -> list[int]:
        """The live processes of ``app_id``'s executors on every worker (JVMs and Python workers)."""
        found: set[int] = set()
        for worker in self.workers:
            found |= _tree(None, worker.workdir / app_id)
        return sorted(found)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the workers, then the master; SIGKILL whatever of the cluster still runs after
        ``timeout`` (daemons, executors, Python workers: every process working under ``workdir``)."""
        for group in (self.workers, [self.master]):
            alive = [d for d in group if d.is_alive()]
            for daemon in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(daemon.pid or 0, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for daemon in alive:
                assert daemon.process is not None
                with contextlib.suppress(subprocess.TimeoutExpired):
                    daemon.process.wait(max(0.1, deadline - time.monotonic()))
        for daemon in self.daemons:
            _kill_tree(_own_pid(daemon), daemon.workdir)
            if daemon.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    daemon.process.wait(10)
        _kill_tree(None, self.workdir)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> SparkStandaloneCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- processes ---------------------------------------------------------------------------------
def _processes() -> dict[int, int]:
    """pid -> parent pid of every process visible in /proc."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            out[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    return out


def _own_pid(daemon: SparkDaemon) -> int | None:
    """The daemon's pid while it is our (not yet reaped) child: a reaped pid may be someone else's."""
    return daemon.pid if daemon.is_alive() else None


def _works_under(pid: int, directory: Path) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(directory)
    except OSError:
        return False


def _tree(root: int | None, directory: Path) -> set[int]:
    """``root`` and its descendants, plus every process whose working directory is in
    ``directory`` (an executor's Python daemon puts itself in its own process group and outlives
    a killed parent, but it keeps its executor's working directory)."""
    parents = _processes()
    found = {p for p in parents if p != os.getpid() and _works_under(p, directory)}
    if root is not None and root in parents:
        found.add(root)
    grew = True
    while grew:
        children = {p for p, parent in parents.items() if parent in found}
        grew = not children <= found
        found |= children
    return found


def _kill_tree(root: int | None, directory: Path) -> list[int]:
    """Stop the whole tree first (nothing forks or restarts anything meanwhile), then SIGKILL it."""
    stopped: set[int] = set()
    for _ in range(20):
        new = _tree(root, directory) - stopped
        if not new:
            break
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return sorted(stopped)


# -- by hand -----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """Run a standalone cluster in the foreground until SIGINT or SIGTERM, then stop all of it."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.spark_cluster",
                                     description="A Spark standalone master and workers on 127.0.0.1.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="1g", help="executor memory per worker")
    parser.add_argument("--dir", type=Path, default=cache_root() / "spark-standalone",
                        help="work dir (daemon logs, executor logs); emptied at start")
    args = parser.parse_args(argv)

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    cluster = SparkStandaloneCluster(args.dir, workers=args.workers, cores=args.cores, memory=args.memory)
    try:
        with cluster:
            print(f"{cluster} up; status at http://127.0.0.1:{cluster.ui_port}/, logs under {args.dir}")
            print(f"  mm2py run -c <config> --runtime spark --spark-master {cluster.master_url}", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
