"""Replication latency of mirrors under a fixed live rate, side by side, between two real Kafka clusters.

Not a test. For each peer in turn: a fresh source topic, a producer process writing into it
(small records, lz4, ``linger.ms=5``: small batches, as live traffic makes them), the peer mirroring
it to its own target topic, and a consumer in this script reading the target topic. The producer
trickles ``--startup-rate`` records/s until the peer's first record reaches the target (so a slow
start-up leaves no backlog to catch up), then writes ``--rate`` records/s. A record's latency is
the time this consumer sees it minus the time it was produced (its CreateTime, taken from the same
clock; the value carries it in µs). Records count if they were produced in the window that starts
``--warmup`` s after the peer's first record reached the target and lasts ``--seconds`` s. Per peer
it prints:

* ``startup s`` / ``startup CPU s`` - from process start until the first record was seen on the target;
* ``src rec/s`` - records the producer got onto the source in the window, per second;
* ``records``, ``not arrived``, ``dupes`` - window records seen on the target, not seen by the time
  every partition had gone past the window or ``--drain-timeout`` ran out, seen again;
* ``p50`` ... ``max`` - latency percentiles of the window records (ms; records that had not arrived
  rank above all others: a percentile that falls on them prints ``late``);
* ``CPU s``, ``CPU %`` - CPU of the mirror's process tree during the window (% of one core);
* ``peak RSS MiB`` - ``VmHWM`` of the mirror (summed over its process tree);
* ``brokers CPU s`` - both brokers' CPU during the window (clusters this script started only).

Peers: ``direct`` (no mirror: the consumer reads the source topic itself, the floor every mirror adds
to), ``mm2py`` (in-process runtime), ``mm2py-spark`` (``mm2py run --runtime spark``, embedded local
mode), ``mm2`` (Apache Kafka MirrorMaker 2, dedicated mode, defaults but the target codec),
``mm2-tuned`` (its producer batching as the record copy's) and ``record-copy``. Usage::

    python benchmarks/latency_bench.py [--quick] [--peers direct,mm2py,mm2py-spark,mm2] [--rate 2000]
    python benchmarks/latency_bench.py --peers mm2py,mm2 --rounds 2   # second round in reverse order

Fairness: before the first peer, ``--cluster-warmup`` s (180) of the same live traffic run through
both clusters (a producer and a consumer on each, and a group commit on each). Fresh brokers were
noisy for their first few minutes of traffic (cause not pinned down; JIT compilation is the likely
one): with 30 s, the first runs had several times the p99 of later ones, whichever peer ran first.
With ``--rounds N`` the peers run N times, every other round in reverse order, each run its own row.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bench_support import (
    COMMANDS,
    Setup,
    compile_package,
    create_topic,
    peer_process,
    run_order,
    total_cpu,
    tree_cpu,
    tree_rss_mib,
    warm_group_coordinator,
)
from confluent_kafka import Consumer
from latency_support import (
    Received,
    Result,
    assign_when_created,
    fmt,
    print_report,
    source_window,
    tally,
    target_consumer,
)
from rate_producer import HEADER

from mm2py.kafka_local import KafkaCluster, start_all

PEERS = ("direct", "mm2py", "mm2py-spark", "mm2", "mm2-tuned", "record-copy")
DEFAULT_PEERS = "direct,mm2py,mm2py-spark,mm2"
DEFINITION = """\
latency = when this script's consumer on the target topic received the record, minus the record's
produce time (its CreateTime on the source, kept by every mirror; the value carries the same clock
reading in us). One host, one clock. startup = peer process start to the first record received.
"""
Sample = tuple[float | None, float, float | None]  # mirror tree CPU s, brokers CPU s, mirror peak RSS


def producer_command(bootstrap: str, topic: str, stats: Path, args: argparse.Namespace) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve().with_name("rate_producer.py")),
            "--bootstrap", bootstrap, "--topic", topic, "--rate", str(args.rate),
            "--partitions", str(args.partitions), "--record-size", str(args.record_size),
            "--codec", args.codec, "--linger-ms", str(args.linger_ms), "--stats", str(stats),
            "--start-rate", str(min(args.startup_rate, args.rate))]


def last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def warm_clusters(source: str, target: str, args: argparse.Namespace, workdir: Path) -> None:
    """The benchmark's live traffic through both clusters for ``--cluster-warmup`` s, with nothing
    mirrored: a producer at ``--rate`` and a consumer on each cluster, and a group commit on each."""
    if args.cluster_warmup <= 0:
        return
    print(f"warming both clusters for {args.cluster_warmup:g} s ...", flush=True)
    topic = f"latency-warmup-{uuid.uuid4().hex[:8]}"
    at_rate = argparse.Namespace(**{**vars(args), "startup_rate": args.rate})
    with contextlib.ExitStack() as stack:
        consumers: list[Consumer] = []
        for name, bootstrap in (("source", source), ("target", target)):
            warm_group_coordinator(bootstrap)
            create_topic(bootstrap, topic, args.partitions)
            stack.enter_context(peer_process(
                producer_command(bootstrap, topic, workdir / f"warmup-{name}.json", at_rate),
                workdir / f"warmup-{name}-producer.out"))
            consumers.append(target_consumer(bootstrap))
            stack.callback(consumers[-1].close)
        assigned: set[int] = set()
        end = time.monotonic() + args.cluster_warmup
        while time.monotonic() < end:
            for i, consumer in enumerate(consumers):
                if i in assigned:
                    consumer.consume(1000, 0.05)
                elif assign_when_created(consumer, topic, args.partitions):
                    assigned.add(i)
                else:
                    time.sleep(0.05)


def run_peer(peer: str, index: int, s: Setup, args: argparse.Namespace, brokers: list[int],
             label: str = "") -> Result:
    """Producer on, peer on, measure, peer off, producer off; then read the window back from the source."""
    src, dst = f"src{index}", f"dst{index}"
    topic = s.topic
    create_topic(s.source, topic, args.partitions)
    direct = peer == "direct"
    res = Result(label or peer, topic if direct else f"{src}.{topic}")
    stats = s.workdir / f"{index}-{peer}-producer.json"
    try:
        cmd = [] if direct else COMMANDS[peer](s, src, dst)
    except Exception as exc:  # e.g. the MirrorMaker jars cannot be resolved
        res.error = f"could not build its command: {exc}"
        return res
    consumer = target_consumer(s.source if direct else s.target)
    received = Received()
    log = s.workdir / f"{index}-{peer}.out"
    try:
        with contextlib.ExitStack() as stack:  # on the way out: the peer stops first, then the producer
            producer = stack.enter_context(peer_process(producer_command(s.source, topic, stats, args),
                                                        s.workdir / f"{index}-{peer}-producer.out"))
            start = time.monotonic()
            try:
                proc = stack.enter_context(peer_process(cmd, log)) if cmd else None
            except OSError as exc:  # e.g. no java
                res.error = f"could not start {cmd[0]}: {exc}"
            else:
                res.error = measure(res, proc, consumer, received, start, args, brokers,
                                    lambda: os.kill(producer.pid, signal.SIGUSR1))
        res.producer = json.loads(stats.read_text()) if stats.exists() else {}
    finally:
        consumer.close()
    if res.startup is None:
        if cmd and log.exists():
            res.error += f" (its output: {log}, ending {last_line(log)!r})"
        return res
    try:
        expected = source_window(s.source, topic, res.window, timeout=120)
    except Exception as exc:
        res.error = (res.error + "; " if res.error else "") + f"reading the source back: {exc}"
        return res
    tally(res, received, expected, s.workdir / f"{index}-{peer}-latency.csv")
    return res


@dataclass
class Probe:
    """CPU and RSS of the mirror's process tree and the brokers' CPU, sampled off the consuming thread
    (a /proc walk takes milliseconds) at the start and at the end of the window."""

    proc: subprocess.Popen[bytes] | None
    brokers: list[int]
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1))
    taken: dict[str, Future[Sample]] = field(default_factory=dict)

    def _sample(self) -> Sample:
        if self.proc is None:
            return None, total_cpu(self.brokers), None
        return tree_cpu(self.proc.pid), total_cpu(self.brokers), tree_rss_mib(self.proc.pid)

    def take(self, name: str) -> None:
        if name not in self.taken:
            self.taken[name] = self.pool.submit(self._sample)

    def fill(self, res: Result) -> None:
        """CPU over the window and peak RSS into ``res`` (what was sampled); shuts the pool down."""
        if "start" in self.taken and "end" in self.taken:
            cpu0, brokers0, _ = self.taken["start"].result()
            cpu1, brokers1, res.rss_mib = self.taken["end"].result()
            if cpu0 is not None and cpu1 is not None:
                res.cpu = cpu1 - cpu0
            if self.brokers:
                res.broker_cpu = brokers1 - brokers0
        self.pool.shutdown()


def poll_once(consumer: Consumer, received: Received) -> int:
    """Take what the target consumer has (waiting up to 50 ms for a first record); returns the
    receive time in µs since the epoch that the records are stamped with."""
    # poll() returns as soon as a record is there; consume() with a timeout would wait for a full
    # batch, so it only takes what is already fetched
    first = consumer.poll(0.05)
    messages = [] if first is None else [first, *consumer.consume(1000, 0)]
    now_us = time.time_ns() // 1000
    received.add(messages, now_us)
    return now_us


def exited(proc: subprocess.Popen[bytes] | None) -> str:
    if proc is not None and proc.poll() is not None:
        return f"the mirror exited with status {proc.returncode}"
    return ""


def await_first(res: Result, proc: subprocess.Popen[bytes] | None, consumer: Consumer,
                received: Received, start: float, args: argparse.Namespace, full_rate: Callable[[], None]
                ) -> str:
    """Wait for the target topic and its first record: sets ``res.startup`` and the window, and
    switches the producer to the full rate. Returns an error, or ""."""
    assigned = False
    while not (error := exited(proc)):
        if time.monotonic() - start > args.startup_timeout:
            what = "no record on" if assigned else "no"
            return f"{what} target topic {res.target_topic} after {args.startup_timeout:.0f}s"
        if not assigned:
            assigned = assign_when_created(consumer, res.target_topic, args.partitions)
            if not assigned:
                time.sleep(0.05)
            continue
        now_us = poll_once(consumer, received)
        if received.first:
            res.startup = time.monotonic() - start
            res.startup_cpu = tree_cpu(proc.pid) if proc else None
            full_rate()
            t0 = now_us + int(args.warmup * 1e6)
            res.window = (t0, t0 + int(args.seconds * 1e6))
            return ""
    return error


def consume_window(res: Result, proc: subprocess.Popen[bytes] | None, consumer: Consumer,
                   received: Received, probe: Probe, args: argparse.Namespace) -> str:
    """Consume until the window is over and every partition has gone past it. Returns an error, or ""."""
    while not (error := exited(proc)):
        now_us = poll_once(consumer, received)
        if now_us >= res.window[0]:
            probe.take("start")
        if now_us < res.window[1]:
            continue
        probe.take("end")
        # each partition is in order: once it shows a record sent after the window, it is complete
        if all(received.last_sent.get(p, 0) >= res.window[1] for p in range(args.partitions)):
            return ""
        if now_us > res.window[1] + args.drain_timeout * 1e6:
            return (f"{args.drain_timeout:.0f}s after the window some partitions had not gone past "
                    "it; what had not arrived ranks as late")
    return error


def measure(res: Result, proc: subprocess.Popen[bytes] | None, consumer: Consumer, received: Received,
            start: float, args: argparse.Namespace, brokers: list[int], full_rate: Callable[[], None]
            ) -> str:
    """Consume the target topic from the peer's start until every partition has gone past the
    window; fills ``res`` (start-up, window, CPU, RSS). Returns an error, or ""."""
    probe = Probe(proc, brokers)
    gc.disable()  # a full collection over ~10^5 entries would show up as latency
    try:
        return (await_first(res, proc, consumer, received, start, args, full_rate)
                or consume_window(res, proc, consumer, received, probe, args))
    finally:
        gc.enable()
        probe.fill(res)


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", default=DEFAULT_PEERS, help="comma-separated subset of " + ",".join(PEERS))
    ap.add_argument("--rate", type=float, default=2000.0, help="records per second produced to the source")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--record-size", type=int, default=200, help="value bytes per record")
    ap.add_argument("--codec", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--linger-ms", "--batch-linger", type=float, default=5.0,
                    help="the source producer's linger.ms (small values: small batches, as live traffic)")
    ap.add_argument("--seconds", type=float, help="measurement window per peer (default 60; 20 with --quick)")
    ap.add_argument("--startup-rate", type=float, default=10.0,
                    help="records/s until the peer's first record reaches the target, so a slow start "
                    "leaves no backlog to catch up (0: --rate from the start)")
    ap.add_argument("--warmup", type=float, default=10.0,
                    help="seconds after the peer's first record on the target before the window starts")
    ap.add_argument("--quick", action="store_true", help="a 20 s window instead of 60 s")
    ap.add_argument("--cluster-warmup", type=float, default=180.0,
                    help="s of live traffic through both clusters before the first peer (0: none)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the peers this many times, every other round in reverse order")
    ap.add_argument("--tasks", type=int, default=1, help="tasks.max for mm2py and MM2")
    ap.add_argument("--spark-master", default="", help="Spark master for mm2py-spark (default local[N])")
    ap.add_argument("--mm2py-prop", action="append", default=[], metavar="KEY=VALUE",
                    help="extra mm2py property ({src}/{dst} expand to the aliases), repeatable")
    ap.add_argument("--mm2-prop", action="append", default=[], metavar="KEY=VALUE",
                    help="extra mm2.properties line for MM2 ({src}/{dst} expand), repeatable")
    ap.add_argument("--source", help="source bootstrap servers (default: start a local cluster)")
    ap.add_argument("--target", help="target bootstrap servers (default: start a local cluster)")
    ap.add_argument("--startup-timeout", type=float, default=300.0,
                    help="seconds a peer may take to its first record on the target")
    ap.add_argument("--drain-timeout", type=float, default=30.0,
                    help="seconds after the window for its last records to arrive")
    ap.add_argument("--workdir", type=Path,
                    help="keep configs, logs and per-record latencies here (default: a temp dir)")
    args = ap.parse_args(argv)
    args.seconds = args.seconds if args.seconds is not None else (20.0 if args.quick else 60.0)
    check_args(ap, args)
    return args


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what cannot be measured (exits with a usage error); splits ``args.peers``."""
    if bool(args.source) != bool(args.target):
        ap.error("give both --source and --target, or neither")
    if not 0 < args.rate <= 100_000:
        ap.error("--rate must be in (0, 100000] records/s")
    if args.partitions < 1:
        ap.error("--partitions must be at least 1")
    if args.record_size < HEADER:
        ap.error(f"--record-size must be at least {HEADER} (sequence number and send time)")
    if args.seconds <= 0 or args.warmup < 0:
        ap.error("--seconds must be > 0 and --warmup >= 0")
    if args.startup_rate < 0:
        ap.error("--startup-rate must be >= 0")
    if args.cluster_warmup < 0 or not 1 <= args.rounds <= 10:
        ap.error("--cluster-warmup must be >= 0 and --rounds in 1..10")
    if args.linger_ms < 0 or args.tasks < 1 or args.startup_timeout <= 0 or args.drain_timeout <= 0:
        ap.error("--linger-ms must be >= 0, --tasks >= 1, the timeouts > 0")
    if args.rate * args.seconds < 1000:
        ap.error(f"--rate x --seconds = {args.rate * args.seconds:.0f} records: too few for percentiles "
                 "(need 1000)")
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    if not args.peers:
        ap.error("--peers is empty")
    if unknown := sorted(set(args.peers) - set(PEERS)):
        ap.error(f"unknown peers {unknown}; choose from {','.join(PEERS)}")
    if len(set(args.peers)) != len(args.peers):
        ap.error("--peers names a peer twice")
    for kv in args.mm2py_prop + args.mm2_prop:
        if "=" not in kv or not kv.split("=", 1)[0].strip():
            ap.error(f"expected KEY=VALUE, got {kv!r}")


@contextlib.contextmanager
def local_clusters(workdir: Path) -> Iterator[tuple[str, str, list[int]]]:
    """Two single-node KRaft clusters (source, target): their bootstraps and broker pids."""
    clusters: list[KafkaCluster] = []
    try:
        for name in ("source", "target"):
            clusters.append(KafkaCluster.create(name, workdir / name))
        start_all(clusters, timeout=300)  # both JVMs boot at once; a busy machine needs the time
        pids = [n.pid for c in clusters for n in c.nodes if n.pid]
        yield clusters[0].bootstrap, clusters[1].bootstrap, pids
    finally:
        for c in reversed(clusters):
            c.stop()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    compile_package()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mm2py-latency-"))
    workdir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    ok = False
    began = time.monotonic()
    try:
        with contextlib.ExitStack() as stack:
            brokers: list[int] = []
            if args.source:
                source, target = args.source, args.target
            else:
                print(f"starting two single-node Kafka clusters in {workdir} ...", flush=True)
                source, target, brokers = stack.enter_context(local_clusters(workdir))
            warm_clusters(source, target, args, workdir)
            load = os.getloadavg()
            run = uuid.uuid4().hex[:8]
            results = []
            for i, (peer, label) in enumerate(run_order(args.peers, args.rounds), start=1):
                print(f"running {label} ...", flush=True)
                setup = Setup(source, target, f"latency-{run}-{i}", workdir, tasks=args.tasks,
                              codec=args.codec, mm2py_props=args.mm2py_prop, mm2_props=args.mm2_prop,
                              spark_master=args.spark_master)
                res = run_peer(peer, i, setup, args, brokers, label)
                print(f"  {label}: start-up {fmt(res.startup, '.1f')} s, {len(res.latencies_ms):,} records, "
                      f"p50 {fmt(res.percentile(0.5), '.1f')} ms, p99 {fmt(res.percentile(0.99), '.1f')} ms"
                      + (f" - {res.error}" if res.error else ""), flush=True)
                results.append(res)
        print(f"\n{datetime.now():%Y-%m-%d %H:%M}, {args.rate:g} records/s of {args.record_size} B "
              f"({args.codec}, linger.ms={args.linger_ms:g}) over {args.partitions} partitions, window "
              f"{args.seconds:g} s after {args.warmup:g} s of warm-up, clusters warmed "
              f"{args.cluster_warmup:g} s, rounds {args.rounds}, tasks.max={args.tasks}, "
              f"{os.cpu_count()} CPUs, load average before the run {load[0]:.2f} (other processes compete "
              f"for the CPUs); whole run {time.monotonic() - began:.0f} s")
        print(DEFINITION)
        print_report(results)
        ok = all(not r.error and r.source_records
                 and not (r.missing or r.dupes or r.unknown or r.bad_timestamps) for r in results)
        return 0 if ok else 1
    finally:
        if ok and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"configs, logs and per-record latencies kept in {workdir}")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("interrupted; producer, mirrors and clusters stopped", file=sys.stderr)
        sys.exit(130)
