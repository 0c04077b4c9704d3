"""Replication latency of mirrors under a fixed live rate, side by side, between two real Kafka clusters.

Not a test. For each peer in turn: a fresh source topic, a producer process writing ``--rate``
records/s into it (small records, lz4, ``linger.ms=5``: small batches, as live traffic makes them),
the peer mirroring it to its own target topic, and a consumer in this script reading the target
topic. A record's latency is the time this consumer sees it minus the time it was produced (its
CreateTime, taken from the same clock; the value carries it in µs). Records count if they were
produced in the window that starts ``--warmup`` s after the peer's first record reached the target
and lasts ``--seconds`` s. Per peer it prints:

* ``startup s`` / ``startup CPU s`` - from process start until the first record was seen on the target;
* ``src rec/s`` - records the producer got onto the source in the window, per second;
* ``records``, ``missing``, ``dupes`` - window records seen on the target, not seen, seen again;
* ``p50`` ... ``max`` - latency percentiles of the window records (ms);
* ``CPU s``, ``CPU %`` - CPU of the mirror's process tree during the window (% of one core);
* ``peak RSS MiB`` - ``VmHWM`` of the mirror (summed over its process tree);
* ``brokers CPU s`` - both brokers' CPU during the window (clusters this script started only).

Peers: ``direct`` (no mirror: the consumer reads the source topic itself, the floor every mirror adds
to), ``mm2py`` (in-process runtime), ``mm2py-spark`` (``mm2py run --runtime spark``, embedded local
mode), ``mm2`` (Apache Kafka MirrorMaker 2, dedicated mode, defaults but the target codec),
``mm2-tuned`` (its producer batching as the record copy's) and ``record-copy``. Usage::

    python benchmarks/latency_bench.py [--quick] [--peers direct,mm2py,mm2py-spark,mm2] [--rate 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench_support import (
    COMMANDS,
    Setup,
    create_topic,
    peer_process,
    total_cpu,
    tree_cpu,
    tree_rss_mib,
)
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)
from rate_producer import HEADER, parse_value

from mm2py.kafka_local import KafkaCluster

PEERS = ("direct", "mm2py", "mm2py-spark", "mm2", "mm2-tuned", "record-copy")
DEFAULT_PEERS = "direct,mm2py,mm2py-spark,mm2"
PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p99.9", 0.999))


@dataclass
class Result:
    peer: str
    target_topic: str
    startup: float | None = None  # s from process start to the first record on the target
    startup_cpu: float | None = None
    window: tuple[int, int] = (0, 0)  # send times (µs since the epoch) that count: [start, end)
    source_records: int = 0  # records produced in the window (read back from the source topic)
    latencies_ms: list[float] = field(default_factory=list)  # first arrival of each window record, sorted
    window_latencies: list[tuple[int, int]] = field(default_factory=list)  # (send µs, latency µs)
    missing: int = 0
    dupes: int = 0
    unknown: int = 0  # records on the target that the source does not have (must be 0)
    bad_timestamps: int = 0  # target CreateTime differs from the source's
    cpu: float | None = None  # mirror's process tree during the window
    rss_mib: float | None = None
    broker_cpu: float | None = None
    producer: dict[str, Any] = field(default_factory=dict)  # rate_producer.py's counters
    error: str = ""

    @property
    def seconds(self) -> float:
        return (self.window[1] - self.window[0]) / 1e6

    def tenths(self) -> tuple[float, float] | None:
        """Median latency (ms) of the records sent in the first and in the last tenth of the window."""
        if not self.window_latencies:
            return None
        span = (self.window[1] - self.window[0]) // 10
        medians = []
        for lo in (self.window[0], self.window[1] - span):
            part = sorted(lat for sent, lat in self.window_latencies if lo <= sent < lo + span)
            medians.append(part[len(part) // 2] / 1000 if part else math.nan)
        return medians[0], medians[1]

    def percentile(self, q: float) -> float | None:
        """Nearest-rank percentile of the (sorted) latencies."""
        lat = self.latencies_ms
        return lat[max(0, math.ceil(q * len(lat)) - 1)] if lat else None


@dataclass
class Received:
    """What the target consumer saw: per sequence number, first send time, latency and count."""

    #: seq -> (send time µs, latency µs, partition) of its first arrival
    first: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    extra: dict[int, int] = field(default_factory=dict)  # seq -> times seen beyond the first
    bad_timestamps: int = 0
    last_sent: dict[int, int] = field(default_factory=dict)  # partition -> newest send time seen

    def add(self, messages: list[Message], now_us: int) -> None:
        for m in messages:
            if (err := m.error()) is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"target consumer: {err}")
                continue
            seq, sent = parse_value(m.value() or b"")
            if seq in self.first:
                self.extra[seq] = self.extra.get(seq, 0) + 1
                continue
            partition = m.partition() or 0
            self.first[seq] = (sent, now_us - sent, partition)
            if self.last_sent.get(partition, 0) < sent:
                self.last_sent[partition] = sent
            if m.timestamp() != (TIMESTAMP_CREATE_TIME, sent // 1000):
                self.bad_timestamps += 1


def target_consumer(bootstrap: str) -> Consumer:
    """The measuring consumer: fetches return as soon as one byte is there, or after 5 ms."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{uuid.uuid4()}",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 5, "fetch.min.bytes": 1,
                     "auto.offset.reset": "earliest", "enable.partition.eof": False})


def assign_when_created(consumer: Consumer, topic: str, partitions: int) -> bool:
    """Assign every partition of ``topic`` from the beginning once it exists; False if not yet."""
    md = consumer.list_topics(topic, timeout=2).topics.get(topic)
    if md is None or md.error is not None or len(md.partitions) < partitions:
        return False
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(md.partitions)])
    return True


def source_window(bootstrap: str, topic: str, window: tuple[int, int], timeout: float) -> set[int]:
    """Sequence numbers of the records on the source topic whose send time falls in ``window``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"scan-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    try:
        parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        pos = dict.fromkeys(parts, 0)
        out: set[int] = set()
        deadline = time.monotonic() + timeout
        while any(pos[p] < ends[p] for p in parts):
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic} back from the source took more than {timeout:.0f}s")
            for m in consumer.consume(10_000, 0.5):
                if m.error() is not None:
                    raise RuntimeError(f"source scan: {m.error()}")
                pos[m.partition() or 0] = (m.offset() or 0) + 1
                seq, sent = parse_value(m.value() or b"")
                if window[0] <= sent < window[1]:
                    out.add(seq)
        return out
    finally:
        consumer.close()


def producer_command(bootstrap: str, topic: str, stats: Path, args: argparse.Namespace) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve().with_name("rate_producer.py")),
            "--bootstrap", bootstrap, "--topic", topic, "--rate", str(args.rate),
            "--partitions", str(args.partitions), "--record-size", str(args.record_size),
            "--codec", args.codec, "--linger-ms", str(args.linger_ms), "--stats", str(stats)]


def run_peer(peer: str, index: int, s: Setup, args: argparse.Namespace, brokers: list[int]) -> Result:
    """Producer on, peer on, measure, peer off, producer off; then read the window back from the source."""
    src, dst = f"src{index}", f"dst{index}"
    topic = s.topic
    create_topic(s.source, topic, args.partitions)
    direct = peer == "direct"
    res = Result(peer, topic if direct else f"{src}.{topic}")
    stats = s.workdir / f"{index}-{peer}-producer.json"
    consumer = target_consumer(s.source if direct else s.target)
    sampler = ThreadPoolExecutor(1)  # /proc walks off the consuming thread
    received = Received()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(peer_process(producer_command(s.source, topic, stats, args),
                                             s.workdir / f"{index}-{peer}-producer.out"))
            start = time.monotonic()
            proc: subprocess.Popen[bytes] | None = None
            if not direct:
                proc = stack.enter_context(peer_process(COMMANDS[peer](s, src, dst),
                                                        s.workdir / f"{index}-{peer}.out"))
            res.error = measure(res, proc, consumer, received, sampler, start, args, brokers)
        res.producer = json.loads(stats.read_text()) if stats.exists() else {}
    finally:
        consumer.close()
        sampler.shutdown()
    if res.error and res.startup is None:
        return res
    expected = source_window(s.source, topic, res.window, timeout=120)
    res.source_records = len(expected)
    seen = received.first
    res.missing = len(expected - seen.keys())
    res.dupes = sum(n for seq, n in received.extra.items() if seq in expected)
    res.unknown = sum(1 for seq, (sent, _, _) in seen.items()
                      if res.window[0] <= sent < res.window[1] and seq not in expected)
    res.bad_timestamps = received.bad_timestamps
    res.window_latencies = [seen[seq][:2] for seq in sorted(expected & seen.keys())]
    res.latencies_ms = sorted(lat / 1000 for _, lat in res.window_latencies)
    with open(s.workdir / f"{index}-{peer}-latency.csv", "w") as out:  # for a closer look at the tail
        out.write("seq,partition,sent_us,latency_us\n")
        for seq in sorted(expected & seen.keys()):
            sent, lat, part = seen[seq]
            out.write(f"{seq},{part},{sent},{lat}\n")
    return res


def measure(res: Result, proc: subprocess.Popen[bytes] | None, consumer: Consumer, received: Received,
            sampler: ThreadPoolExecutor, start: float, args: argparse.Namespace, brokers: list[int]) -> str:
    """Consume the target topic until the window is over and every partition has gone past it;
    fills ``res`` (start-up, window, CPU, RSS). Returns an error, or ""."""
    assigned = False
    first_us: int | None = None
    samples: dict[str, Future[tuple[float | None, float, float | None]]] = {}

    def sample() -> tuple[float | None, float, float | None]:
        """CPU of the mirror's process tree, of the brokers, peak RSS of the mirror's tree."""
        if proc is None:
            return None, total_cpu(brokers), None
        return tree_cpu(proc.pid), total_cpu(brokers), tree_rss_mib(proc.pid)

    gc.disable()  # a full collection over ~10^5 entries would show up as latency
    try:
        while True:
            if proc is not None and proc.poll() is not None:
                return f"exited with {proc.returncode}; see its .out file in the workdir"
            if not assigned:
                if time.monotonic() - start > args.startup_timeout:
                    return f"target topic {res.target_topic} not created after {args.startup_timeout:.0f}s"
                assigned = assign_when_created(consumer, res.target_topic, args.partitions)
                if not assigned:
                    time.sleep(0.05)
                    continue
            # poll() returns as soon as a record is there; consume() with a timeout would wait for
            # a full batch, so it only takes what is already fetched
            first = consumer.poll(0.05)
            messages = [] if first is None else [first, *consumer.consume(1000, 0)]
            now_us = time.time_ns() // 1000
            received.add(messages, now_us)
            if first_us is None:
                if received.first:
                    first_us = now_us
                    res.startup = time.monotonic() - start
                    res.startup_cpu = tree_cpu(proc.pid) if proc else None
                    t0 = first_us + int(args.warmup * 1e6)
                    res.window = (t0, t0 + int(args.seconds * 1e6))
                elif time.monotonic() - start > args.startup_timeout:
                    return f"no record on {res.target_topic} after {args.startup_timeout:.0f}s"
                continue
            if "start" not in samples and now_us >= res.window[0]:
                samples["start"] = sampler.submit(sample)
            if now_us < res.window[1]:
                continue
            if "end" not in samples:
                samples["end"] = sampler.submit(sample)
            # each partition is in order: once it shows a record sent after the window, it is complete
            if all(received.last_sent.get(p, 0) >= res.window[1] for p in range(args.partitions)):
                break
            if now_us > res.window[1] + args.drain_timeout * 1e6:
                return (f"{args.drain_timeout:.0f}s after the window some partitions had not gone past "
                        "it; what did not arrive counts as missing")
    finally:
        gc.enable()
        cpu0, brokers0, _ = samples["start"].result() if "start" in samples else (None, 0.0, None)
        cpu1, brokers1, res.rss_mib = samples["end"].result() if "end" in samples else (None, 0.0, None)
        if cpu0 is not None and cpu1 is not None:
            res.cpu = cpu1 - cpu0
        if brokers and "end" in samples:
            res.broker_cpu = brokers1 - brokers0
    return ""


# ------------------------------------------------------------------------------------ report
def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_report(results: list[Result]) -> None:
    head = ("peer", "startup s", "startup CPU s", "src rec/s", "records", "missing", "dupes",
            *(f"{name} ms" for name, _ in PERCENTILES), "max ms", "CPU s", "CPU %", "peak RSS MiB",
            "brokers CPU s")
    rows = []
    for r in results:
        measured = bool(r.source_records)
        secs = r.seconds
        rows.append((
            r.peer, fmt(r.startup, ".1f"), fmt(r.startup_cpu, ".1f"),
            fmt(r.source_records / secs if measured and secs else None, ",.0f"),
            f"{len(r.latencies_ms):,}" if measured else "-",
            f"{r.missing:,}" if measured else "-", f"{r.dupes:,}" if measured else "-",
            *(fmt(r.percentile(q), ".1f") for _, q in PERCENTILES),
            fmt(r.latencies_ms[-1] if r.latencies_ms else None, ".1f"),
            fmt(r.cpu, ".1f"), fmt(r.cpu / secs * 100 if r.cpu is not None and secs else None, ".0f"),
            fmt(r.rss_mib, ".0f"), fmt(r.broker_cpu, ".1f"),
        ))
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    for i, row in enumerate([head, *rows]):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w)
                        for j, (c, w) in enumerate(zip(row, widths, strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for r in results:
        p = r.producer
        if p:
            behind_ms = p.get("max_behind_s", 0.0) * 1000
            print(f"{r.peer}: producer {p.get('produced', 0):,} records in {p.get('seconds', 0.0):.0f}s "
                  f"({p.get('rate', 0.0):,.0f}/s overall), at most {behind_ms:.0f} ms behind schedule"
                  + (f", errors {p['errors']}" if p.get("errors") else ""))
        if r.error:
            print(f"{r.peer}: FAILED - {r.error}")
        if (tenths := r.tenths()) is not None:
            first, last = tenths
            settled = not first > 2 * last + 50  # (NaN: too few records to tell)
            print(f"{r.peer}: p50 of the records sent in the first / last tenth of the window: {first:.1f} / "
                  f"{last:.1f} ms" + ("" if settled else " - STILL CATCHING UP when the window began "
                                      "(a longer --warmup measures the steady state)"))
        problems = [f"{n:,} {what}" for n, what in ((r.missing, "missing"), (r.dupes, "duplicates"),
                    (r.unknown, "unknown records"), (r.bad_timestamps, "changed timestamps")) if n]
        if problems:
            print(f"{r.peer}: NOT exactly once - " + ", ".join(problems))


# -------------------------------------------------------------------------------------- main
def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", default=DEFAULT_PEERS, help="comma-separated subset of " + ",".join(PEERS))
    ap.add_argument("--rate", type=float, default=2000.0, help="records per second produced to the source")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--record-size", type=int, default=200, help="value bytes per record")
    ap.add_argument("--codec", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--linger-ms", type=float, default=5.0, help="the source producer's linger.ms")
    ap.add_argument("--seconds", type=float, help="measurement window per peer (default 60; 20 with --quick)")
    ap.add_argument("--warmup", type=float, default=10.0,
                    help="seconds after the peer's first record on the target before the window starts")
    ap.add_argument("--quick", action="store_true", help="a 20 s window instead of 60 s")
    ap.add_argument("--tasks", type=int, default=1, help="tasks.max for mm2py and MM2")
    ap.add_argument("--spark-master", default="", help="Spark master for mm2py-spark (default local[N])")
    ap.add_argument("--mm2py-prop", action="append", default=[], metavar="KEY=VALUE",
                    help="extra mm2py property ({src}/{dst} expand to the aliases), repeatable")
    ap.add_argument("--mm2-prop", action="append", default=[], metavar="KEY=VALUE",
                    help="extra mm2.properties line for MM2 ({src}/{dst} expand), repeatable")
    ap.add_argument("--source", help="source bootstrap servers (default: start a local cluster)")
    ap.add_argument("--target", help="target bootstrap servers (default: start a local cluster)")
    ap.add_argument("--startup-timeout", type=float, default=180.0,
                    help="seconds a peer may take to its first record on the target")
    ap.add_argument("--drain-timeout", type=float, default=30.0,
                    help="seconds after the window for its last records to arrive")
    ap.add_argument("--workdir", type=Path,
                    help="keep configs, logs and per-record latencies here (default: a temp dir)")
    args = ap.parse_args(argv)
    args.seconds = args.seconds if args.seconds is not None else (20.0 if args.quick else 60.0)
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
    return args


@contextlib.contextmanager
def local_clusters(workdir: Path) -> Iterator[tuple[str, str, list[int]]]:
    """Two single-node KRaft clusters (source, target): their bootstraps and broker pids."""
    clusters: list[KafkaCluster] = []
    try:
        for name in ("source", "target"):
            clusters.append(KafkaCluster.create(name, workdir / name))
            clusters[-1].start(timeout=120)
        pids = [n.pid for c in clusters for n in c.nodes if n.pid]
        yield clusters[0].bootstrap, clusters[1].bootstrap, pids
    finally:
        for c in reversed(clusters):
            c.stop()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
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
            load = os.getloadavg()
            run = uuid.uuid4().hex[:8]
            results = []
            for i, peer in enumerate(args.peers, start=1):
                print(f"running {peer} ...", flush=True)
                setup = Setup(source, target, f"latency-{run}-{i}", workdir, tasks=args.tasks,
                              codec=args.codec, mm2py_props=args.mm2py_prop, mm2_props=args.mm2_prop,
                              spark_master=args.spark_master)
                res = run_peer(peer, i, setup, args, brokers)
                print(f"  {peer}: start-up {fmt(res.startup, '.1f')} s, {len(res.latencies_ms):,} records, "
                      f"p50 {fmt(res.percentile(0.5), '.1f')} ms, p99 {fmt(res.percentile(0.99), '.1f')} ms"
                      + (f" - {res.error}" if res.error else ""), flush=True)
                results.append(res)
        print(f"\n{datetime.now():%Y-%m-%d %H:%M}, {args.rate:g} records/s of {args.record_size} B "
              f"({args.codec}, linger.ms={args.linger_ms:g}) over {args.partitions} partitions, window "
              f"{args.seconds:g} s after {args.warmup:g} s of warm-up, tasks.max={args.tasks}, "
              f"{os.cpu_count()} CPUs, load average before the run {load[0]:.2f} (other processes compete "
              f"for the CPUs); whole run {time.monotonic() - began:.0f} s\n")
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
