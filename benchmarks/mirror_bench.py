"""mm2py side by side with its peers, mirroring the same backlog between two real Kafka clusters.

Not a test. Seeds one source topic *before* any mirror starts, then runs each peer in turn as its
own process, copying that backlog to a fresh target topic, and measures:

* ``seconds``   - wall time from process start until the target end offsets reach the source's;
* ``startup s`` - from process start until the first record shows up on the target;
* ``rec/s``, ``MB/s`` - records and source batch bytes (compressed, as stored) per wall second;
* ``rec/s after start-up`` - records per second from the first record on the target to the last
  (the copy itself, without the process's start-up);
* ``CPU s``     - utime+stime of the mirror process (``/proc/<pid>/stat``) when it caught up;
* ``startup CPU s`` - the part of it spent before the first record reached the target;
* ``peak RSS``  - ``VmHWM`` of the mirror process;
* ``brokers CPU s`` - CPU both brokers spent meanwhile (only for clusters this script started);
* ``proxy CPU s`` - CPU of the latency proxy meanwhile (only with ``--rtt-ms``).

Peers: ``mm2py`` (``python -m mm2py.cli run``), ``mm2`` (Apache Kafka MirrorMaker 2, dedicated
mode, its defaults except the target codec), ``mm2-tuned`` (the same with the producer batching of
the record copy: ``batch.size`` = ``--batch-kib``, ``linger.ms=20``) and ``record-copy`` (a
confluent-kafka consumer+producer loop: decompress, per-record objects, recompress). Usage::

    python benchmarks/mirror_bench.py [--quick] [--records N] [--peers mm2py,mm2,record-copy]
    python benchmarks/mirror_bench.py --rtt-ms 40 [--rtt-side target]   # one cluster across a WAN-like RTT
    python benchmarks/mirror_bench.py --scenario small-batches --records 500000   # 1 KiB batches
    python benchmarks/mirror_bench.py ... --rounds 3 --warmup-round   # each peer once untimed first

Scenarios: ``backlog`` (default) seeds with ``batch.size`` = ``--batch-kib`` and ``linger.ms=50``,
large batches that every peer copies at its best; ``small-batches`` seeds a backlog written in
tiny batches (``batch.size=1024``, ``batch.num.messages=4``, ``linger.ms=0``: about 1 KiB and 4
records each, lz4 by default), where mm2py coalesces runs of small batches (``mm2py.coalesce.*``).
Each peer's line "target ...: avg batch" shows the batch size the target was left with.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench_support import (
    COMMANDS,
    OffsetProbe,
    Setup,
    WanPorts,
    compile_package,
    create_topic,
    jit_cpu,
    make_values,
    peer_process,
    run_order,
    start_latency_proxy,
    stop_process,
    total_cpu,
    tree_cpu,
    tree_rss_mib,
    warm_group_coordinator,
)
from confluent_kafka import Producer

from mm2py.kafka_local import KafkaCluster

PEERS = ("mm2py", "mm2py-unverified", "mm2", "mm2-tuned", "record-copy")


# ---------------------------------------------------------------------------------- topic data
def seed(bootstrap: str, topic: str, args: argparse.Namespace) -> float:
    """Produce the backlog: ``args.records`` records round-robin over the partitions."""
    values = make_values(args.record_size)
    batching: dict[str, int] = {"linger.ms": 50, "batch.size": args.batch_kib * 1024,
                                "batch.num.messages": 1_000_000}
    if args.scenario == "small-batches":  # a linger.ms=0 producer under light load
        batching = {"linger.ms": 0, "batch.size": 1024, "batch.num.messages": 4}
    producer = Producer({
        "bootstrap.servers": bootstrap, "compression.type": args.codec, "acks": "all",
        "enable.idempotence": True, "queue.buffering.max.kbytes": 262144, **batching,
    })
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    start = time.monotonic()
    for i in range(args.records):
        while True:
            try:
                producer.produce(topic, values[i % len(values)], b"key-%d" % i,
                                 partition=i % args.partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) or errors:
        raise RuntimeError(f"seeding {topic} failed: {errors[:3]}")
    return time.monotonic() - start


def warm_target_brokers(bootstrap: str, args: argparse.Namespace) -> None:
    """Write a tenth of the backlog (at most 100k records) the same way to a topic of the target
    cluster before any peer runs. A broker's JVM compiles its produce path on first use (the C2
    compiler thread alone took seconds of CPU in a fresh target broker), which would otherwise fall
    on the first peer and compete with it for the CPUs."""
    warm = argparse.Namespace(**{**vars(args), "records": min(100_000, max(1, args.records // 10))})
    create_topic(bootstrap, "bench-warmup-produce", args.partitions)
    seed(bootstrap, "bench-warmup-produce", warm)


@dataclass
class BatchSummary:
    batches: int = 0
    bytes: int = 0
    records: int = 0
    codecs: set[str] = field(default_factory=set)

    def line(self) -> str:
        avg = self.bytes / self.batches / 1024 if self.batches else 0.0
        return (f"{self.records:,} records in {self.batches:,} batches, {self.bytes / 1e6:.1f} MB, "
                f"avg batch {avg:.1f} KiB, codec {','.join(sorted(self.codecs)) or '-'}")


def scan_batches(bootstrap: str, topic: str) -> BatchSummary:
    """Read ``topic`` as raw RecordBatches (mm2py's fetcher) and sum what is stored."""
    from mm2py.client.cluster import ClusterClient
    from mm2py.client.fetcher import FetcherConfig, RawFetcher
    from mm2py.protocol.types import TopicPartition as TP

    async def scan() -> BatchSummary:
        out = BatchSummary()
        async with ClusterClient(bootstrap) as client:
            await client.refresh_metadata([topic])
            fetcher = RawFetcher(client, FetcherConfig(max_wait_ms=100, partition_max_bytes=8 << 20))
            tps = [TP(topic, p) for p in range(len(client.topics[topic].partitions))]
            ends = await client.list_offsets(tps)
            pos = dict.fromkeys(tps, 0)
            while any(pos[tp] < ends[tp] for tp in tps):
                for tp, f in (await fetcher.fetch({t: o for t, o in pos.items() if o < ends[t]})).items():
                    for b in f.batches:
                        out.batches += 1
                        out.bytes += b.size
                        out.records += b.records_count
                        out.codecs.add(b.codec.name.lower())
                    pos[tp] = max(pos[tp], f.next_offset)
        return out

    return asyncio.run(scan())


@dataclass
class Result:
    peer: str  # its label: "mm2py", or "mm2py #2" for its second round
    target_topic: str
    records: int = 0
    duplicates: int = 0
    seconds: float | None = None
    startup: float | None = None
    cpu: float | None = None
    startup_cpu: float | None = None
    rss_mib: float | None = None
    broker_cpu: float | None = None
    #: the part of broker_cpu that is the brokers' JIT compiler threads (a fresh JVM compiles for
    #: minutes; whichever peer runs then pays for it in shared CPUs)
    broker_jit_cpu: float | None = None
    proxy_cpu: float | None = None
    error: str = ""
    stored: BatchSummary | None = None


def run_peer(peer: str, label: str, index: int, s: Setup, args: argparse.Namespace,
             source_ends: dict[int, int], brokers: list[int]) -> Result:
    src, dst = f"src{index}", f"dst{index}"
    res = Result(label, f"{src}.{s.topic}")
    # --runtime spark: the mm2py peer is the `mm2py run --runtime spark` command
    cmd = COMMANDS["mm2py-spark" if peer == "mm2py" and args.runtime == "spark" else peer](s, src, dst)
    probe = OffsetProbe(s.target_direct or s.target)
    expected = sum(source_ends.values())
    proxies = [s.proxy_pid] if s.proxy_pid else []
    try:
        broker_cpu0, jit_cpu0, proxy_cpu0 = total_cpu(brokers), jit_cpu(brokers), total_cpu(proxies)
        start = time.monotonic()
        log = s.workdir / f"{index}-{peer}.out"  # one per run: rounds do not overwrite each other's
        with peer_process(cmd, log) as proc:
            while True:
                time.sleep(args.poll)
                elapsed = time.monotonic() - start
                if proc.poll() is not None:
                    res.error = f"exited with {proc.returncode}; see {log}"
                    return res
                ends = probe.ends(res.target_topic) or {}
                if res.startup is None and sum(ends.values()) > 0:
                    res.startup, res.startup_cpu = elapsed, tree_cpu(proc.pid)
                if ends and all(ends.get(p, 0) >= o for p, o in source_ends.items()):
                    res.seconds = elapsed
                    res.cpu, res.rss_mib = tree_cpu(proc.pid), tree_rss_mib(proc.pid)
                    res.broker_cpu = total_cpu(brokers) - broker_cpu0 if brokers else None
                    res.broker_jit_cpu = jit_cpu(brokers) - jit_cpu0 if brokers else None
                    res.proxy_cpu = total_cpu(proxies) - proxy_cpu0 if proxies else None
                    break
                if elapsed > args.timeout:
                    res.error = f"timeout: {sum(ends.values()):,}/{expected:,} records after {elapsed:.0f}s"
                    res.cpu, res.rss_mib = tree_cpu(proc.pid), tree_rss_mib(proc.pid)
                    return res
            time.sleep(1.0)  # anything produced twice and still in flight lands now
        res.records = sum((probe.ends(res.target_topic) or {}).values())
        res.duplicates = max(0, res.records - expected)
        return res
    finally:
        probe.close()


# ------------------------------------------------------------------------------------ report
def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_report(results: list[Result], source: BatchSummary, expected: int) -> None:
    gb = source.bytes / 1e9
    head: tuple[str, ...] = ("peer", "records", "dupes", "seconds", "startup s", "rec/s",
                             "rec/s after start-up", "MB/s", "CPU s", "startup CPU s", "CPU s/GB",
                             "peak RSS MiB", "brokers CPU s", "of it JIT s", "proxy CPU s")
    rows: list[tuple[str, ...]] = []
    for r in results:
        ok = r.seconds is not None
        rows.append((
            r.peer, f"{r.records:,}" if ok else "-", str(r.duplicates) if ok else "-",
            fmt(r.seconds, ".1f"), fmt(r.startup, ".1f"),
            fmt(expected / r.seconds if ok and r.seconds else None, ",.0f"),
            fmt(expected / (r.seconds - r.startup)
                if ok and r.seconds and r.startup is not None and r.seconds > r.startup else None, ",.0f"),
            fmt(source.bytes / 1e6 / r.seconds if ok and r.seconds else None, ".1f"),
            fmt(r.cpu, ".1f"), fmt(r.startup_cpu, ".1f"),
            fmt(r.cpu / gb if r.cpu is not None and gb else None, ".1f"),
            fmt(r.rss_mib, ".0f"), fmt(r.broker_cpu, ".1f"), fmt(r.broker_jit_cpu, ".1f"),
            fmt(r.proxy_cpu, ".1f"),
        ))
    if all(r.proxy_cpu is None for r in results):  # no latency proxy: drop its column
        head, rows = head[:-1], [row[:-1] for row in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    for i, row in enumerate([head, *rows]):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths,
                                                                                           strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for r in results:
        if r.error:
            print(f"{r.peer}: FAILED - {r.error}")
        elif r.records != expected:
            print(f"{r.peer}: copied {r.records:,} records, source has {expected:,}"
                  + (f" ({r.duplicates:,} duplicates)" if r.duplicates else " (MISSING records)"))
        if r.stored is not None:
            print(f"{r.peer} target {r.target_topic}: {r.stored.line()}")
    by = {r.peer: r for r in results if r.seconds is not None}
    mine, mm2 = by.get("mm2py", by.get("mm2py #1")), by.get("mm2", by.get("mm2 #1"))
    if mine and mm2 and mine.cpu and mm2.cpu and mine.rss_mib and mm2.rss_mib and mine.seconds:
        print(f"mm2py vs MM2: CPU {mine.cpu / mm2.cpu:.2f}x ({mine.cpu:.1f} s vs {mm2.cpu:.1f} s), "
              f"peak RSS {mine.rss_mib / mm2.rss_mib:.2f}x ({mine.rss_mib:.0f} vs {mm2.rss_mib:.0f} MiB), "
              f"wall time {mine.seconds / (mm2.seconds or 1):.2f}x")


# -------------------------------------------------------------------------------------- main
def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="backlog", choices=["backlog", "small-batches"],
                    help="backlog: large producer batches; small-batches: ~1 KiB batches of 4 records")
    ap.add_argument("--quick", action="store_true", help="100k records (under ~2 minutes)")
    ap.add_argument("--records", type=int, help="records to seed (default 1,000,000; 100,000 with --quick)")
    ap.add_argument("--record-size", type=int, default=200, help="value bytes per record")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--codec", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--batch-kib", type=int, default=256, help="producer batch.size (uncompressed)")
    ap.add_argument("--tasks", type=int, default=1, help="tasks.max for mm2py and MM2")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of " + ",".join(PEERS))
    ap.add_argument("--source", help="source bootstrap servers (default: start a local cluster)")
    ap.add_argument("--target", help="target bootstrap servers (default: start a local cluster)")
    ap.add_argument("--runtime", default="inprocess", choices=["inprocess", "spark"],
                    help="runtime of the mm2py peer (spark: embedded local mode unless --spark-master)")
    ap.add_argument("--spark-master", default="", help="Spark master for --runtime spark (default local[N])")
    ap.add_argument("--mm2py-prop", action="append", default=[], metavar="KEY=VALUE",
                    help="extra mm2py property ({src}/{dst} expand to the aliases), repeatable")
    ap.add_argument("--mm2-prop", action="append", default=[], metavar="KEY=VALUE",
                    help="extra mm2.properties line for MM2 (repeatable); {src}/{dst} stand for its "
                    "cluster aliases, e.g. '{dst}.producer.linger.ms=20'")
    ap.add_argument("--rtt-ms", type=float, default=0.0,
                    help="add this round-trip time between the peers and one cluster (a latency proxy "
                    "process in front of it; 0 = direct, no proxy)")
    ap.add_argument("--rtt-side", default="source", choices=["source", "target"],
                    help="the cluster behind the latency proxy: source (the mirror consumes across the "
                    "WAN, the usual deployment) or target (it produces across the WAN)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the peers this many times, every other round in reverse order (each run "
                    "its own row)")
    ap.add_argument("--warmup-round", action="store_true",
                    help="run every peer once, untimed, before the rounds: the brokers' JVMs compile the "
                         "fetch and produce paths of every peer's traffic before any run is measured")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per peer")
    ap.add_argument("--poll", type=float, default=0.1, help="seconds between end-offset polls")
    ap.add_argument("--workdir", type=Path, help="keep configs and logs here (default: a temp dir)")
    args = ap.parse_args(argv)
    if bool(args.source) != bool(args.target):
        ap.error("give both --source and --target, or neither")
    if args.rtt_ms and args.source:
        ap.error("--rtt-ms needs the clusters this script starts")
    args.records = args.records or (100_000 if args.quick else 1_000_000)
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    if unknown := set(args.peers) - set(PEERS):
        ap.error(f"unknown peers {sorted(unknown)}")
    if not 1 <= args.rounds <= 10:
        ap.error("--rounds must be in 1..10")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    compile_package()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mm2py-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    clusters: list[KafkaCluster] = []
    proxy = None
    ok = False
    try:
        if args.source:
            source, target, brokers = args.source, args.target, []
            direct = {"source": source, "target": target}
        else:
            print(f"starting two single-node Kafka clusters in {workdir} ...", flush=True)
            wan = WanPorts() if args.rtt_ms else None
            for name in ("source", "target"):
                behind = wan is not None and name == args.rtt_side
                cluster = KafkaCluster.create(
                    name, workdir / name, broker_config=wan.broker_config() if wan and behind else None,
                    ports=[(wan.client, wan.controller)] if wan and behind else None)
                clusters.append(cluster)
                cluster.start(timeout=120)
            src_c, dst_c = clusters
            source, target = src_c.bootstrap, dst_c.bootstrap
            direct = {"source": source, "target": target}
            if wan is not None:
                proxy = start_latency_proxy(wan.proxy, wan.client, args.rtt_ms, workdir / "latency_proxy.out")
                direct[args.rtt_side] = f"127.0.0.1:{wan.direct}"
                if args.rtt_side == "source":
                    source = f"127.0.0.1:{wan.proxy}"
                else:
                    target = f"127.0.0.1:{wan.proxy}"
                print(f"{args.rtt_side} behind a latency proxy: +{args.rtt_ms:g} ms round trip", flush=True)
            brokers = [n.pid for c in (src_c, dst_c) for n in c.nodes if n.pid]
        for bootstrap in {direct["source"], direct["target"]}:
            warm_group_coordinator(bootstrap)
        load = os.getloadavg()
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        create_topic(direct["source"], topic, args.partitions)
        took = seed(direct["source"], topic, args)
        warm_target_brokers(direct["target"], args)
        stored = scan_batches(direct["source"], topic)
        probe = OffsetProbe(direct["source"])
        source_ends = probe.ends(topic) or {}
        probe.close()
        expected = sum(source_ends.values())
        print(f"seeded {topic}: {stored.line()} ({args.record_size} B values, produced in {took:.1f}s)")
        setup = Setup(source, target, topic, workdir, tasks=args.tasks, codec=args.codec,
                      batch_kib=args.batch_kib, mm2py_props=args.mm2py_prop, mm2_props=args.mm2_prop,
                      spark_master=args.spark_master, target_direct=direct["target"],
                      proxy_pid=proxy.pid if proxy else None)
        warmups = args.peers if args.warmup_round else []
        for i, peer in enumerate(warmups, start=1):
            print(f"warm-up run of {peer} (not reported) ...", flush=True)
            res = run_peer(peer, f"{peer} warm-up", i, setup, args, source_ends, brokers)
            print(f"  {peer} warm-up: {fmt(res.seconds, '.1f')} s {res.error}", flush=True)
        results = []
        for i, (peer, label) in enumerate(run_order(args.peers, args.rounds), start=len(warmups) + 1):
            print(f"running {label} ...", flush=True)
            res = run_peer(peer, label, i, setup, args, source_ends, brokers)
            if res.seconds is not None:
                res.stored = scan_batches(direct["target"], res.target_topic)
            print(f"  {label}: {fmt(res.seconds, '.1f')} s {res.error}", flush=True)
            results.append(res)
        print(f"\nscenario {args.scenario}: {expected:,} records, {stored.bytes / 1e6:.1f} MB stored "
              f"({args.codec}, avg batch {stored.bytes / max(1, stored.batches) / 1024:.1f} KiB), "
              f"{args.partitions} partitions, rounds {args.rounds}"
              f"{' after a warm-up round' if args.warmup_round else ''}, tasks.max={args.tasks}, "
              f"mm2py runtime {args.runtime}, "
              + (f"{args.rtt_side} cluster +{args.rtt_ms:g} ms RTT (latency proxy), " if args.rtt_ms else "")
              + f"{os.cpu_count()} CPUs, "
              f"load average before the run {load[0]:.2f} (other processes compete for the CPUs)\n")
        print_report(results, stored, expected)
        ok = all(r.seconds is not None and r.records == expected for r in results)
        return 0 if ok else 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if proxy is not None:
            stop_process(proxy)
        for c in reversed(clusters):
            c.stop()
        if ok and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"configs and logs kept in {workdir}")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("interrupted; mirrors and clusters stopped", file=sys.stderr)
        sys.exit(130)
