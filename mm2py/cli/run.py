"""``mm2py run``: the enabled flows of a config file mirrored until SIGINT or SIGTERM, in this
process or on Spark, with the REST API and the metrics page when asked for."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Union

from mm2py import interrupts

if TYPE_CHECKING:
    import asyncio

    from mm2py.config.models import MirrorMakerConfig
    from mm2py.rest_api.server import MetricsServer
    from mm2py.runtime.inprocess import Worker
    from mm2py.runtime.loop_watch import LoopWatch
    from mm2py.runtime.spark.driver.worker import SparkWorker

#: a worker of either runtime, as ``mm2py run`` drives it
Runnable = Union["Worker", "SparkWorker"]


def run(args: argparse.Namespace) -> int:
    # Ctrl-C or SIGTERM before the event loop runs unwinds the command (status 130 or 143: nothing
    # started); from then on it stops the worker cleanly (status 0; mm2py.interrupts)
    import asyncio
    import logging
    import os

    from mm2py.config.models import load_config
    from mm2py.runtime import log_throttle

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("mm2py.librdkafka").setLevel(logging.ERROR)
    from mm2py.protocol import native

    if (why := native.unavailable()) is not None:
        logging.getLogger("mm2py").warning("%s", why)
    log_throttle.install(args.log_repeat_seconds)  # a repeated warning: once, then once a minute
    config = load_config(args.config, args.secrets_dir)
    for note in config.notes:  # a Strimzi resource's fields mm2py has no use for, each with why
        logging.getLogger("mm2py.config").info("%s: %s", args.config, note)
    from mm2py.rest_api.security.settings import rest_settings

    args.rest = rest_settings(config.source_keys, rest_host=args.rest_host, rest_port=args.rest_port,
                              jaas_config=args.rest_jaas_config, kafka_opts=os.environ.get("KAFKA_OPTS"),
                              read_only=args.rest_read_only)
    if args.metrics_secured and (args.rest is None or not args.metrics_port):
        print("mm2py: error: --metrics-secured takes the REST API's TLS and authentication: it needs "
              "--metrics-port and the REST API's listeners (listeners=https://... or --rest-port)",
              file=sys.stderr)
        return 2
    if not config.enabled_flows() and args.rest is None and not args.state_file:
        print(f"mm2py: error: {args.config} enables no flow (set e.g. 'east->west.enabled = true', "
              "or add flows over HTTP with --rest-port)", file=sys.stderr)
        return 2
    spark_conf = _spark_conf(args.spark_conf)
    if spark_conf is None or (args.runtime == "spark" and not _spark_installed()):
        return 2
    asyncio.run(_serve_worker(args, config, spark_conf))
    if args.runtime == "spark":
        from mm2py.runtime.spark.driver.session import end_driver_jvm

        end_driver_jvm()
    return 0


def _spark_conf(items: Sequence[str]) -> dict[str, str] | None:
    """``--spark-conf KEY=VALUE`` items as a mapping; None (after saying why) if one is malformed."""
    spark_conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"mm2py: error: --spark-conf expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return None
        spark_conf[key.strip()] = value
    return spark_conf


def _spark_installed() -> bool:
    """pyspark is there (the ``spark`` extra); False after saying what to install."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("mm2py: error: --runtime spark needs pyspark, which this installation lacks: "
              "pip install 'mm2py[spark]' (the in-process runtime needs nothing more)", file=sys.stderr)
        return False
    return True


def _worker(args: argparse.Namespace, config: MirrorMakerConfig, spark_conf: dict[str, str]) -> Runnable:
    """The worker of the chosen runtime (not started)."""
    if args.runtime == "spark":
        from mm2py.runtime.spark.driver.lease_scheduler import LeaseSettings
        from mm2py.runtime.spark.driver.worker import SparkWorker

        leases = LeaseSettings(lease_seconds=args.spark_lease_seconds, commit_interval=args.commit_interval,
                               fence_seconds=args.spark_fence_seconds)
        return SparkWorker(config, master=args.spark_master, commit_interval=args.commit_interval,
                           spark_conf=spark_conf, round_seconds=args.spark_round_seconds,
                           state_file=args.state_file, mode=args.spark_mode, leases=leases,
                           hosts=args.spark_hosts)
    from mm2py.runtime.inprocess import Worker

    return Worker(config, commit_interval=args.commit_interval, state_file=args.state_file)


def _stopper(stop: asyncio.Event) -> Callable[[], None]:
    """What a first SIGINT or SIGTERM calls (from the signal handler): on the loop, set ``stop``
    and end admin calls still waiting for an unreachable cluster."""
    import asyncio

    from mm2py.rdkafka.admin import interrupt_admin_calls

    def on_loop() -> None:
        stop.set()
        interrupt_admin_calls()

    loop = asyncio.get_running_loop()

    def from_handler() -> None:
        loop.call_soon_threadsafe(on_loop)

    return from_handler


async def _serve_metrics(
    args: argparse.Namespace, worker: Runnable, watch: LoopWatch
) -> MetricsServer | None:
    """The ``--metrics-port`` page: plain from a thread, or with ``--metrics-secured`` over the REST
    API's TLS and behind its authentication (the server returned, to stop)."""
    from prometheus_client import REGISTRY

    from mm2py.runtime.metrics import LoopWatchCollector, WorkerCollector
    from mm2py.runtime.metrics_page import PartitionTimesPage, serve_metrics

    REGISTRY.register(WorkerCollector(worker, partition_times=False))
    REGISTRY.register(LoopWatchCollector(watch))
    if args.metrics_secured:
        from mm2py.rest_api.server import MetricsServer

        server = MetricsServer(REGISTRY, PartitionTimesPage(worker), args.rest, args.metrics_host,
                               args.metrics_port)
        await server.start()
        print(f"metrics: {server.url}/metrics", flush=True)
        return server
    serve_metrics(args.metrics_host, args.metrics_port, REGISTRY, PartitionTimesPage(worker))
    print(f"metrics: http://{args.metrics_host}:{args.metrics_port}/metrics", flush=True)
    return None


async def _serve_worker(
    args: argparse.Namespace, config: MirrorMakerConfig, spark_conf: dict[str, str]
) -> None:
    """Run the worker until SIGINT or SIGTERM, with the REST API and metrics when asked for."""
    import asyncio

    stop = asyncio.Event()
    with interrupts.stop_on_signals(_stopper(stop)):
        await _serve_until(stop, args, config, spark_conf)


async def _serve_until(
    stop: asyncio.Event, args: argparse.Namespace, config: MirrorMakerConfig, spark_conf: dict[str, str]
) -> None:
    from mm2py.errors import Mm2pyError

    worker = _worker(args, config, spark_conf)
    rest = None
    if args.rest is not None:
        from mm2py.rest_api.server import RestServer

        rest = RestServer(worker, settings=args.rest)
    from mm2py.runtime.loop_watch import LoopWatch, freeze_start_up_heap

    watch = LoopWatch()  # a stalled event loop delays every partition at once: say when, and where
    metrics = await _serve_metrics(args, worker, watch) if args.metrics_port else None
    try:
        if rest is not None:
            await rest.start()
            for url in rest.urls:
                print(f"REST API: {url} (try {url}/flows; the operator page: {url}/ui)", flush=True)
        if stop.is_set():  # a signal while the worker was being set up: nothing has started yet
            print("stopped before start-up", flush=True)
            return
        print("mirroring: " + (", ".join(worker.flows) or "no flow yet"), flush=True)
        freeze_start_up_heap()
        watch.start()
        await worker.run(stop)
    except Mm2pyError as exc:
        if not stop.is_set():
            raise
        print(f"stopped during start-up ({exc})", flush=True)
        return
    finally:
        watch.stop()
        if rest is not None:
            await rest.stop()
        if metrics is not None:
            await metrics.stop()
    print("stopped; progress committed", flush=True)


#: ``mm2py run --help``'s last words: how it stops, and its exit statuses (README: Running a mirror)
RUN_EPILOG = (
    "Ctrl-C (SIGINT) or SIGTERM stops it cleanly at any moment once the worker is being set up "
    "(start-up, a cluster that does not answer, mirroring, a catch-up): every task commits its "
    "position and it exits 0. While mm2py is still loading nothing has started: it exits 130 "
    "(143 for SIGTERM) at once. A second Ctrl-C during the stop exits at once with 130 and says so "
    "on stderr (positions since the last commit are not committed). Exit 2: an error it names "
    "in one line."
)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _add_http_arguments(cmd: argparse.ArgumentParser) -> None:
    """``mm2py run``'s metrics port and REST API (its listeners and security are in the config file)."""
    cmd.add_argument("--metrics-port", type=int, default=0,
                     help="serve Prometheus metrics on this port (default: off)")
    cmd.add_argument("--metrics-host", default="127.0.0.1", help="address for --metrics-port")
    cmd.add_argument("--metrics-secured", action="store_true",
                     help="serve --metrics-port with the REST API's TLS settings (HTTPS when it has an "
                          "https listener) and behind its authentication (default: plain and open, as "
                          "Prometheus scrapes)")
    cmd.add_argument("--rest-port", type=int, default=0,
                     help="serve the REST API (create/change/remove flows) on this port (default: off)")
    cmd.add_argument("--rest-host", default="127.0.0.1", help="address for --rest-port")
    cmd.add_argument("--rest-jaas-config", default=None, metavar="FILE",
                     help="the JAAS file of Kafka Connect's Basic authentication (with rest.extension."
                          "classes=...BasicAuthSecurityRestExtension; default: -Djava.security.auth."
                          "login.config in KAFKA_OPTS)")
    cmd.add_argument("--rest-read-only", action="store_true",
                     help="the REST API refuses every change (403) and its page at /ui shows no actions")


def add_secrets_dir(cmd: Any) -> None:
    cmd.add_argument("--secrets-dir", default=None, metavar="DIR",
                     help="a Strimzi resource's Secrets and ConfigMaps, as Kubernetes mounts them: "
                          "DIR/<secretName>/<key> (default: $MM2PY_SECRETS_DIR, else /etc/mm2py/secrets)")


def add_parser(sub: Any) -> None:
    """Adds ``run`` to the ``mm2py`` command line."""
    cmd = sub.add_parser("run", help="run the enabled flows of a config file (in this process or on Spark)",
                         epilog=RUN_EPILOG)
    cmd.add_argument("--config", "-c", required=True,
                     help="mm2.properties, YAML or JSON (mm2py's shape, or a Strimzi "
                          "KafkaMirrorMaker2 resource)")
    add_secrets_dir(cmd)
    cmd.add_argument("--commit-interval", type=float, default=1.0,
                     help="seconds between progress commits (default 1)")
    cmd.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    cmd.add_argument("--log-repeat-seconds", type=float, default=60.0,
                     help="a warning that repeats (the same kind, e.g. while a cluster is down) is "
                          "logged once, then at most once this often with a count (default 60)")
    _add_http_arguments(cmd)
    cmd.add_argument("--state-file", default=None,
                     help="keep flows created or changed over REST in this JSON file across restarts")
    cmd.add_argument("--runtime", choices=["inprocess", "spark"], default="inprocess",
                     help="where tasks run: in this process (default) or on Spark executors")
    cmd.add_argument("--spark-master", default=None,
                     help="Spark master URL, e.g. local[4] or spark://host:7077 (default: embedded "
                          "local[N], N = total tasks.max; spark-submit's master under spark-submit)")
    cmd.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                     help="extra Spark setting (repeatable)")
    cmd.add_argument("--spark-mode", choices=["leases", "lease-jobs", "rounds"], default="leases",
                     help="leases (default): each task mirrors continuously, handing over to a "
                          "successor every --spark-lease-seconds, on a mirror host: one long-lived "
                          "process per executor running all its leases with one fetch session per "
                          "source broker; lease-jobs: each lease a Spark job and process of its "
                          "own; rounds: bounded rounds up to the end offsets seen at each round's "
                          "start (one-off backfills)")
    cmd.add_argument("--spark-hosts", type=int, default=None, metavar="N",
                     help="mirror hosts carrying the leases (default: one per Spark executor)")
    cmd.add_argument("--spark-lease-seconds", type=_positive_seconds, default=60.0,
                     help="how long a Spark lease mirrors before a successor takes over (default 60)")
    cmd.add_argument("--spark-fence-seconds", type=_positive_seconds, default=4.0,
                     help="an executor that hears nothing from the driver for this long stops "
                          "mirroring; a lease whose executor is lost (its connection closed, or "
                          "Spark gave up on it) is leased again within twice this (default 4)")
    cmd.add_argument("--spark-round-seconds", type=float, default=10.0,
                     help="longest Spark round before a task commits and the next round starts")
    cmd.set_defaults(func=run)
