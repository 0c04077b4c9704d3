"""Mirrors at the shape of real ones - many partitions, mostly trickling - side by side.

Not a test. On two single-node KRaft clusters (started here unless ``--source/--target``), for each
peer in turn (mm2py, Apache Kafka MirrorMaker 2; peer *n* gets the aliases ``src<n>``/``dst<n>``
and topics of its own, ``scale-<run>-<n>-<i>``, allowed by the regex ``scale-<run>-<n>-.*``):

1. creates ``--topics`` topics sharing ``--partitions`` partitions on the source and seeds every
   partition with ``--backlog`` records (one record per stored batch, as a trickle writes them)
   while no mirror runs;
2. starts the peer and times its first record on the target (from its start until any target
   partition holds one) and the catch-up: until every target partition holds the backlog (its CPU
   until then too);
3. after ``--settle`` s, a trickle producer (its own process) writes ``--rate`` records/s for
   ``--seconds`` s, round-robin over all partitions, each record carrying its send time. Over that
   window: the mirror's CPU (process tree), the source and target brokers' CPU (``/proc``), the
   brokers' Fetch and Produce requests per second (their ``RequestsPerSec`` meters, read over JMX
   with Kafka's ``JmxTool`` just before and just after the window), and the replication latency
   (receive time minus send time) of every record of ``--sample-partitions`` partitions, read by a
   consumer on the target; trickle records on the target when the window ends and after draining;
4. stops the peer, compares every partition's end offsets on the target with the source's
   (missing / duplicated records), and deletes the peer's topics.

The exit status is 0 only if every peer delivered every record exactly once. Usage::

    python benchmarks/scale_bench.py [--quick] [--partitions 2000] [--topics 40] [--peers mm2py,mm2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
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
from typing import Any

from bench_support import (
    COMMANDS,
    Setup,
    compile_package,
    cpu_seconds,
    peer_process,
    process_role,
    total_cpu,
    tree_cpu,
    tree_cpu_parts,
    tree_rss_mib,
    warm_group_coordinator,
)
from confluent_kafka import Consumer, TopicPartition
from latency_bench import poll_once
from latency_support import Received
from own_requests import Key, host_rates, own_rates, own_requests
from rate_producer import HEADER
from scale_support import (
    TP,
    Cluster,
    Reading,
    Row,
    Topics,
    create_topics,
    delete_topics,
    fmt,
    jmx_jvm_args,
    layout,
    partitions_of,
    print_table,
    rates,
    read_seqs,
    request_counts,
    sample,
    seed,
)
from worker_kill import executors_cpu, kill_first_worker

from mm2py.kafka_local import KafkaCluster, start_all
from mm2py.kafka_local.cluster import free_port

PEERS = ("mm2py", "mm2py-unverified", "mm2py-spark", "mm2py-spark-jobs", "mm2", "mm2-tuned")
#: a deleted topic's files go after 1 s; no offset/time index entries in these tiny logs: with the
#: default (an entry per 4 KiB) every partition's first entry fell due at the same moment, in the
#: window, and the page faults of thousands of fresh index pages held a broker busy for 10-20 s,
#: with or without a mirror (a read then scans its segment's few batches from the start)
BROKER_CONFIG = {"file.delete.delay.ms": "1000", "log.index.interval.bytes": str(2**30)}


@dataclass
class Env:
    """The clusters every peer runs against."""

    source: str
    target: str
    workdir: Path
    brokers: list[int] = field(default_factory=list)  # source, target broker pids (clusters started here)
    jmx: list[int] = field(default_factory=list)  # their JMX ports
    data_dirs: list[Path] = field(default_factory=list)  # their log directories
    spark: Any = None  # --spark-workers: the standalone cluster the Spark peers run on
    #: --kill-worker-at: the CPU s the killed worker's executors had spent, by role (still counted)
    gone_parts: dict[str, float] = field(default_factory=dict)

    def executors(self) -> list[int]:
        """The processes of the Spark cluster's applications (executor JVMs, their Python): a
        Spark peer's executors, not children of its driver, counted in its CPU."""
        if self.spark is None:
            return []
        return [p for app in self.spark.active_apps() for p in self.spark.app_processes(str(app["id"]))]

    def cpu(self, pid: int) -> float | None:
        own = tree_cpu(pid)
        return None if own is None else own + total_cpu(self.executors()) + sum(self.gone_parts.values())

    def cpu_parts(self, pid: int) -> dict[str, float]:
        parts = tree_cpu_parts(pid)
        for p in self.executors():  # every process of the executors' trees, each counted once
            cpu = cpu_seconds(p)
            if cpu is not None:
                role = process_role(p)
                parts[role] = parts.get(role, 0.0) + cpu
        for role, cpu in self.gone_parts.items():
            parts[role] = parts.get(role, 0.0) + cpu
        return parts

    def __post_init__(self) -> None:
        self.src, self.tgt = Cluster(self.source), Cluster(self.target)


class Stop(Exception):
    """The peer cannot be measured further (exited, or a deadline passed)."""


def alive(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        raise Stop(f"the mirror exited with status {proc.returncode}")


def trickle_command(env: Env, topics: dict[str, int], first_seq: int, start_at: float, stats: Path,
                    args: argparse.Namespace) -> list[str]:
    """``scale_support.py trickle`` writing to the peer's source topics from ``start_at`` (epoch s)."""
    return [sys.executable, str(Path(__file__).resolve().with_name("scale_support.py")), "trickle",
            "--bootstrap", env.source, "--topics", ",".join(f"{t}:{n}" for t, n in topics.items()),
            "--rate", str(args.rate), "--seconds", str(args.seconds), "--start-at", repr(start_at),
            "--record-size", str(args.record_size), "--codec", args.codec, "--linger-ms", str(args.linger_ms),
            "--first-seq", str(first_seq), "--stats", str(stats)]


def wait_ends(env: Env, want: dict[TP, int], proc: subprocess.Popen[bytes], timeout: float,
              consumer: Consumer | None = None, received: Received | None = None,
              first: Callable[[], bool] | None = None) -> dict[TP, int]:
    """Poll the target's end offsets (every 0.25 s) until each partition reached ``want``; consumes
    meanwhile when given a consumer. Until ``first()`` says the target holds a record, it is asked
    instead. Raises Stop after ``timeout`` s."""
    deadline, ends = time.monotonic() + timeout, None
    while True:
        alive(proc)
        ends = env.tgt.end_offsets(want) if first is None or first() else None
        if ends is not None and all(ends[tp] >= n for tp, n in want.items()):
            return ends
        if time.monotonic() > deadline:
            done = sum(min(ends[tp], n) for tp, n in want.items()) if ends else 0
            raise Stop(f"after {timeout:.0f}s the target held {done:,} of {sum(want.values()):,} records")
        until = time.monotonic() + 0.25
        while consumer is not None and received is not None and time.monotonic() < until:
            poll_once(consumer, received)
        time.sleep(max(0.0, until - time.monotonic()))


def run_peer(peer: str, n: int, run: str, env: Env, args: argparse.Namespace) -> Row:
    """Topics, backlog, the peer's run, the exactly-once check; its topics are deleted after."""
    row = Row(peer)
    tops = Topics(layout(f"scale-{run}-{n}-", args.topics, args.partitions), f"src{n}")
    parts = partitions_of(tops.source)
    try:
        print(f"  creating {len(tops.source)} topics with {len(parts):,} partitions, seeding {args.backlog} "
              "records into each ...", flush=True)
        create_topics(env.src, tops.source)
        first_seq = seed(env.source, parts, args.backlog, args.record_size, args.codec)
        if (backlog := env.src.end_offsets(parts, 60)) is None:
            raise RuntimeError("no end offsets for the seeded topics")
        if args.precreate_target:
            create_topics(env.tgt, {tops.tgt((t, 0))[0]: k for t, k in tops.source.items()})
        setup = Setup(env.source, env.target, f"scale-{run}-{n}-.*", env.workdir, tasks=args.tasks,
                      codec=args.codec, mm2py_props=args.mm2py_prop, mm2_props=args.mm2_prop,
                      spark_master=env.spark.master_url if env.spark is not None else "")
        env.gone_parts = {}
        cmd = COMMANDS[peer](setup, tops.alias, f"dst{n}")
        if peer.startswith("mm2py"):  # its own request counts, per cluster and API (Spark: per host too)
            row.metrics_port = free_port()
            cmd += ["--metrics-port", str(row.metrics_port)]
        with peer_process(cmd, env.workdir / f"{n}-{peer}.out") as proc:
            measure(row, proc, f"{n}-{peer}", env, args, tops, backlog, first_seq)
        if peer.startswith("mm2py-spark"):
            out = (env.workdir / f"{n}-{peer}.out").read_text(errors="replace")
            row.leases_started = [int(m) for m in re.findall(r"Spark leases running.*?\((\d+) started", out)]
    except Exception as exc:  # Stop, or what Kafka, the peer's command or a file said
        row.error = str(exc)
    if row.kill is not None:  # the next peer (or round) finds every worker running
        env.spark.restore()
    try:
        if row.catchup_s is not None:  # the peer has stopped: nothing more can arrive
            check(row, env, tops, env.src.end_offsets(parts, 60))
    except Exception as exc:
        row.error = (row.error + "; " if row.error else "") + f"final check: {exc}"
    with contextlib.suppress(Exception):  # the next peer finds the clusters as this one did
        delete_topics(env.src, list(tops.source), env.data_dirs)
        delete_topics(env.tgt, [tops.tgt((t, 0))[0] for t in tops.source], env.data_dirs)
    return row


def measure(row: Row, proc: subprocess.Popen[bytes], tag: str, env: Env, args: argparse.Namespace,
            tops: Topics, backlog: dict[TP, int], first_seq: int) -> None:
    """Catch-up, settle, trickle window, drain: fills ``row``; raises Stop when it cannot go on."""
    start = time.monotonic()
    def first() -> bool:  # every target partition, until one holds a record
        if row.first_s is None and env.tgt.holds_any(tops.on_target(backlog)):
            row.first_s = time.monotonic() - start
        return row.first_s is not None

    wait_ends(env, tops.on_target(backlog), proc, args.catchup_timeout, first=first)
    row.catchup_s, row.catchup_cpu = time.monotonic() - start, env.cpu(proc.pid)
    print(f"  first record on the target after {fmt(row.first_s, '.1f')} s, caught up in "
          f"{row.catchup_s:.1f} s ({fmt(row.catchup_cpu, '.1f')} CPU s)", flush=True)
    settle_end = time.monotonic() + args.settle
    while time.monotonic() < settle_end:
        alive(proc)
        time.sleep(0.2)
    sampled = sample(tops.source, args.sample_partitions)
    # a fetch returns as soon as a sampled partition has a record; fewer idle fetches than 5 ms waits
    consumer = Consumer({"bootstrap.servers": env.target, "group.id": f"scale-{uuid.uuid4()}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 500, "fetch.min.bytes": 1,
                         "enable.partition.eof": False, "log_level": 3})
    received, stats = Received(), env.workdir / f"{tag}-trickle.json"
    # JmxTool runs off this thread (the consumer keeps polling), just before the window and at its end
    start_at = time.time() + 3.0  # the producer connects meanwhile
    pool, jmx = ThreadPoolExecutor(1), list[Future[list[Reading | None]]]()
    try:
        consumer.assign([TopicPartition(*tops.tgt(tp), backlog[tp]) for tp in sampled])
        own0, own_from = own_requests(row.metrics_port), time.monotonic()  # before the trickle starts
        with peer_process(trickle_command(env, tops.source, first_seq, start_at, stats, args),
                          env.workdir / f"{tag}-trickle.out") as producer:
            while time.time() < start_at:
                if env.jmx and not jmx and time.time() > start_at - 1.5:
                    jmx.append(pool.submit(request_counts, env.jmx))
                poll_once(consumer, received)
            t0, cpu0, parts0 = time.monotonic(), env.cpu(proc.pid), env.cpu_parts(proc.pid)
            spark_peer = env.spark is not None and tag.endswith(("mm2py-spark", "mm2py-spark-jobs"))
            kill_s = args.kill_worker_at if spark_peer else None
            kill_at = None if kill_s is None else start_at + kill_s
            hosts0 = executors_cpu(env.spark) if kill_at is not None else {}
            brokers0 = [cpu_seconds(b) or 0.0 for b in env.brokers]
            at_kill: Future[tuple[dict[Key, float], float]] | None = None  # the hosts' requests then
            while time.time() < start_at + args.seconds:
                alive(proc)
                if kill_at is not None and at_kill is None and time.time() >= kill_at:
                    at_kill = pool.submit(lambda: (own_requests(row.metrics_port), time.monotonic()))
                if at_kill is not None and at_kill.done() and row.kill is None:
                    row.kill = kill_first_worker(env.spark, hosts0)
                    env.gone_parts = row.kill.gone_parts
                    print(f"  SIGKILLed Spark {row.kill.victim} {time.time() - start_at:.1f} s into the "
                          "window", flush=True)
                poll_once(consumer, received)
            cpu1, brokers1 = env.cpu(proc.pid), [cpu_seconds(b) or 0.0 for b in env.brokers]
            parts1 = env.cpu_parts(proc.pid)
            row.cpu_parts = {k: v - parts0.get(k, 0.0) for k, v in parts1.items()}
            if jmx:
                jmx.append(pool.submit(request_counts, env.jmx))
            row.window_s, row.rss_mib = time.monotonic() - t0, tree_rss_mib(proc.pid)
            row.cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
            if env.brokers:
                row.broker_cpu = (brokers1[0] - brokers0[0], brokers1[1] - brokers0[1])
            # read off this thread, the consumer polled meanwhile: a record that arrives while this
            # thread waits would be stamped late (seconds, for 2,000 partitions' end offsets)
            with ThreadPoolExecutor(2) as readers:
                own = readers.submit(lambda: (own_requests(row.metrics_port), time.monotonic() - own_from))
                target_ends = readers.submit(env.tgt.end_offsets, tops.on_target(backlog))
                while not (own.done() and target_ends.done()):
                    poll_once(consumer, received)
            (own1, own_span), ends = own.result(), target_ends.result()
            if own0 and own1:
                row.own_rates = own_rates(own0, own1, own_span, tops.alias)
                row.host_fetch = host_rates(own0, own1, own_span, tops.alias)
                if row.kill is not None and at_kill is not None:
                    own_k, k_at = at_kill.result()
                    row.kill.fetch_until = host_rates(own0, own_k, k_at - own_from, tops.alias)
                    row.kill.fetch_after = host_rates(own_k, own1, own_span - (k_at - own_from), tops.alias)
            if ends is not None:
                row.by_window_end = sum(ends.values()) - sum(backlog.values())
            while producer.poll() is None and time.time() < start_at + args.seconds + 40:
                poll_once(consumer, received)  # it stops sending at the window's end, then flushes
        produced = json.loads(stats.read_text()) if stats.exists() else {}
        if produced.get("errors") or produced.get("undelivered") or produced.get("late_s", 9) > 0.5:
            row.problems.append(f"trickle producer: {produced or 'no counters written'}")
        if (src_ends := env.src.end_offsets(backlog, 60)) is None:
            raise RuntimeError("no end offsets on the source after the window")
        row.sent = sum(src_ends.values()) - sum(backlog.values())
        try:
            wait_ends(env, tops.on_target(src_ends), proc, args.drain_timeout, consumer, received)
        except Stop as exc:
            row.problems.append(f"draining: {exc}")
        # the consumer reads the sampled partitions up to what the drain found on the target
        sampled_ends = {tops.tgt(tp): src_ends[tp] for tp in sampled}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
                tp.offset < sampled_ends[(tp.topic, tp.partition)]
                for tp in consumer.position([TopicPartition(*tp) for tp in sampled_ends])):
            poll_once(consumer, received)
        if (ends := env.tgt.end_offsets(tops.on_target(src_ends))) is not None:
            row.after_drain = sum(ends.values()) - sum(backlog.values())
        where: dict[int, TP] = {}  # seq -> its source partition
        expected = read_seqs(env.source, {tp: (backlog[tp], src_ends[tp]) for tp in sampled}, where)
        tally(row, received, expected, env.workdir / f"{tag}-latency.csv", where)
        if row.kill is not None:
            row.kill.measure(received, where)
        if len(jmx) == 2 and (before := jmx[0].result()) and (after := jmx[1].result()):
            row.src_rates, row.tgt_rates = rates(before[0], after[0]), rates(before[1], after[1])
            if row.src_rates and before[0] and after[0]:
                row.jmx_span = after[0][0] - before[0][0]
                row.producer_produce_s = produced.get("produce_requests", 0) / row.jmx_span
    finally:
        consumer.close()
        pool.shutdown()


def tally(row: Row, received: Received, expected: set[int], csv: Path, where: dict[int, TP]) -> None:
    """Latencies of the sampled partitions' trickle records (each also into ``csv``, with its source
    partition from ``where``); what was seen twice or not at all."""
    seen = received.first
    row.latencies_ms = sorted(seen[s][1] / 1000 for s in expected & seen.keys())
    csv.write_text("seq,sent_us,latency_us,topic,partition\n" + "".join(
        f"{s},{seen[s][0]},{seen[s][1]},{where.get(s, ('', -1))[0]},{where.get(s, ('', -1))[1]}\n"
        for s in sorted(expected & seen.keys())))
    row.not_arrived = len(expected - seen.keys())
    twice = sum(n for s, n in received.extra.items() if s in expected)
    for count, what in ((row.not_arrived, "sampled records never received"),
                        (twice, "sampled records seen twice"),
                        (len(seen.keys() - expected), "records on sampled partitions the source lacks"),
                        (received.bad_timestamps, "records with a changed timestamp")):
        if count:
            row.problems.append(f"{count:,} {what}")


def check(row: Row, env: Env, tops: Topics, source: dict[TP, int] | None) -> None:
    """Every partition's end offset on the target against the source's, after the peer stopped."""
    time.sleep(1.0)
    target = env.tgt.end_offsets(tops.on_target(source or {}), 60)
    if source is None or target is None:
        raise RuntimeError("no end offsets")
    for tp, end in source.items():
        diff = target[tops.tgt(tp)] - end
        row.missing += max(0, -diff)
        row.dupes += max(0, diff)
        row.bad_partitions += diff != 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--peers", default="mm2py,mm2", help="comma-separated subset of " + ",".join(PEERS))
    ap.add_argument("--partitions", type=int, default=2000, help="partitions in all, spread over --topics")
    ap.add_argument("--topics", type=int, default=40)
    ap.add_argument("--backlog", type=int, default=20, help="records per partition before the peer starts")
    ap.add_argument("--rate", type=float, default=200.0, help="trickle records/s over all partitions")
    ap.add_argument("--seconds", type=float, help="trickle window (default 120; 30 with --quick)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the peers this many times, the order reversed every other round (a "
                    "peer is not always the first on freshly started brokers, whose JIT still works)")
    ap.add_argument("--settle", type=float, default=10.0, help="s between catch-up and the window")
    ap.add_argument("--sample-partitions", type=int, default=400,
                    help="partitions whose records' latency is measured (spread over every topic)")
    ap.add_argument("--record-size", type=int, default=200, help="value bytes per record")
    ap.add_argument("--codec", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--linger-ms", type=float, default=5.0, help="the trickle producer's linger.ms")
    ap.add_argument("--tasks", type=int, default=1, help="tasks.max for mm2py and MM2")
    ap.add_argument("--spark-workers", type=int, default=0, metavar="N",
                    help="run the Spark peers on a standalone master with N workers of one core "
                         "each (from a clone: tests/support/spark_cluster.py), their executors' CPU "
                         "counted in the peer's (default: embedded local[N])")
    ap.add_argument("--kill-worker-at", type=float, metavar="S",
                    help="with --spark-workers >= 2: SIGKILL a Spark worker with its executor and mirror "
                         "host S s into a Spark peer's window, and measure how long its partitions "
                         "went without a mirror (benchmarks/worker_kill.py)")
    ap.add_argument("--precreate-target", action="store_true",
                    help="create the target topics before the peer starts (above ~9,900 partitions the "
                    "KRaft controller refuses the one CreateTopics request each mirror sends)")
    ap.add_argument("--mm2py-prop", action="append", default=[], metavar="KEY=VALUE",
                    help="extra mm2py property ({src}/{dst} expand to the aliases), repeatable")
    ap.add_argument("--mm2-prop", action="append", default=[], metavar="KEY=VALUE",
                    help="extra mm2.properties line for MM2 ({src}/{dst} expand), repeatable")
    ap.add_argument("--source", help="source bootstrap servers (default: start a local cluster)")
    ap.add_argument("--target", help="target bootstrap servers (default: start a local cluster)")
    ap.add_argument("--catchup-timeout", type=float, default=900.0)
    ap.add_argument("--drain-timeout", type=float, default=60.0)
    ap.add_argument("--workdir", type=Path, help="keep configs and logs here (default: a temp dir)")
    args = ap.parse_args(argv)
    args.seconds = args.seconds if args.seconds is not None else (30.0 if args.quick else 120.0)
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    if bool(args.source) != bool(args.target):
        ap.error("give both --source and --target, or neither")
    if not args.peers or set(args.peers) - set(PEERS) or len(set(args.peers)) != len(args.peers):
        ap.error(f"--peers: distinct names out of {','.join(PEERS)}")
    if args.topics < 1 or args.partitions < args.topics or args.backlog < 1 or args.sample_partitions < 1:
        ap.error("need --topics >= 1, --partitions >= --topics, --backlog >= 1, --sample-partitions >= 1")
    if args.rounds < 1:
        ap.error("need --rounds >= 1")
    if args.kill_worker_at is not None and not (
            args.spark_workers >= 2 and 0 < args.kill_worker_at < args.seconds):
        ap.error("--kill-worker-at needs --spark-workers >= 2 and 0 < S < --seconds")
    if args.rate <= 0 or args.seconds <= 0 or args.settle < 0 or args.tasks < 1 or args.record_size < HEADER:
        ap.error(f"need --rate > 0, --seconds > 0, --settle >= 0, --tasks >= 1, --record-size >= {HEADER}")
    for kv in args.mm2py_prop + args.mm2_prop:
        if "=" not in kv or not kv.split("=", 1)[0].strip():
            ap.error(f"expected KEY=VALUE, got {kv!r}")
    return args


@contextlib.contextmanager
def local_clusters(workdir: Path) -> Iterator[Env]:
    """Two single-node KRaft clusters (``BROKER_CONFIG``), each with a JMX agent."""
    clusters: list[KafkaCluster] = []
    try:
        ports = [free_port(), free_port()]
        for name, port in zip(("source", "target"), ports, strict=True):
            clusters.append(KafkaCluster.create(name, workdir / name, broker_config=BROKER_CONFIG))
            clusters[-1].jvm_args = jmx_jvm_args(port)
        start_all(clusters, timeout=300)
        yield Env(clusters[0].bootstrap, clusters[1].bootstrap, workdir,
                  [n.pid for c in clusters for n in c.nodes if n.pid], ports,
                  [n.workdir / "data" for c in clusters for n in c.nodes])
    finally:
        for c in reversed(clusters):
            c.stop()


def warm(env: Env, args: argparse.Namespace) -> None:
    """What a real cluster has done before: a group coordinator on each cluster (MM2's Connect
    workers need one on the target), and the target's produce path used once."""
    for bootstrap in (env.source, env.target):
        warm_group_coordinator(bootstrap)
    topics = {"scale-warmup": min(200, args.partitions)}
    create_topics(env.tgt, topics)
    seed(env.target, partitions_of(topics), args.backlog, args.record_size, args.codec)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    compile_package()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mm2py-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    stopping = []  # SIGTERM: a SystemExit raised inside a client call can come out as another error

    def on_term(*_: object) -> None:
        stopping.append(True)
        sys.exit(143)  # run the finally blocks

    signal.signal(signal.SIGTERM, on_term)
    ok, began = False, time.monotonic()
    try:
        with contextlib.ExitStack() as stack:
            if args.source:
                env = Env(args.source, args.target, workdir)
            else:
                print(f"starting two single-node Kafka clusters in {workdir} ...", flush=True)
                env = stack.enter_context(local_clusters(workdir))
            if args.spark_workers:
                sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the clone's tests/
                from tests.support.spark_cluster import SparkStandaloneCluster

                env.spark = stack.enter_context(SparkStandaloneCluster(
                    workdir / "spark", workers=args.spark_workers, cores=1))
                print(f"Spark: {env.spark}", flush=True)
            warm(env, args)
            run, rows, loads = uuid.uuid4().hex[:6], [], []
            order = [(k, peer) for k in range(args.rounds)
                     for peer in (args.peers if k % 2 == 0 else args.peers[::-1])]
            for n, (k, peer) in enumerate(order, start=1):
                if stopping:
                    sys.exit(143)
                label = peer if args.rounds == 1 else f"{peer} (round {k + 1})"
                loads.append(f"{label} {os.getloadavg()[0]:.2f}")
                print(f"running {label} (load average {os.getloadavg()[0]:.2f}) ...", flush=True)
                rows.append(run_peer(peer, n, run, env, args))
                r = rows[-1]
                r.peer = label
                print(f"  {label}: catch-up {fmt(r.catchup_s, '.1f')} s, window CPU {fmt(r.cpu, '.1f')} s, "
                      f"p99 {fmt(r.percentile(0.99), '.1f')} ms" + (f" - {r.error}" if r.error else ""),
                      flush=True)
        print(f"\n{datetime.now():%Y-%m-%d %H:%M}, {args.partitions:,} partitions in {args.topics} topics, "
              f"backlog {args.backlog} records/partition, trickle {args.rate:g} records/s of "
              f"{args.record_size} B "
              f"({args.codec}, linger.ms={args.linger_ms:g}) for {args.seconds:g} s after {args.settle:g} s, "
              f"latency over {args.sample_partitions} sampled partitions, tasks.max={args.tasks}, "
              f"{os.cpu_count()} CPUs, load average before each peer: {', '.join(loads)}; "
              f"whole run {time.monotonic() - began:.0f} s")
        print_table(rows)
        ok = all(r.ok for r in rows)
        return 0 if ok else 1
    finally:
        if ok and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"configs and logs kept in {workdir}")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("interrupted; mirror, producer and clusters stopped", file=sys.stderr)
        sys.exit(130)
