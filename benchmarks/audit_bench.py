"""How fast ``mm2py audit`` compares a mirrored backlog, between two real Kafka clusters.

Not a test. Seeds one source topic (large producer batches, as ``mirror_bench.py`` does), mirrors
it with ``mm2py run`` until the target holds all of it, stops the mirror, then runs
``mm2py audit`` on the flow ``--rounds`` times, each as its own process, and prints per run:

* ``verdict``   - the audit's (``agree`` expected: its exit status must be 0);
* ``seconds``   - wall time of the ``mm2py audit`` process (start-up and anchor reads included);
* ``compare s`` - the report's ``compare_seconds``: from the first fetch of the comparison to its
  end (after the clusters were connected and the anchors read);
* ``MB/s``      - stored source bytes (compressed batches, as in ``mirror_bench.py``) per wall second;
* ``compare MB/s`` - the same per ``compare s``: the comparison's own rate;
* ``CPU s``, ``peak RSS MiB`` - of the audit process (``wait4``'s rusage);
* ``brokers CPU s`` - both brokers' CPU meanwhile (only for clusters this script started);
* ``batches``/``records`` - target batches found byte-identical, records compared one by one.

Usage::

    python benchmarks/audit_bench.py                       # 2,000,000 records of 200 B, lz4, 6 partitions
    python benchmarks/audit_bench.py --quick               # 200,000 records
    python benchmarks/audit_bench.py --records 5000000 --codec zstd --rounds 3
    python benchmarks/audit_bench.py --scenario small-batches    # 500,000 records compared one by one
    python benchmarks/audit_bench.py --source host:9092 --target host2:9092   # existing clusters
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench_support import (
    ROOT,
    OffsetProbe,
    Setup,
    compile_package,
    create_topic,
    make_values,
    mm2py_command,
    peer_process,
    total_cpu,
)
from confluent_kafka import Producer

from mm2py.kafka_local import KafkaCluster


def seed(bootstrap: str, topic: str, args: argparse.Namespace) -> float:
    """``args.records`` records round-robin over the partitions, in large batches (or, with
    ``--scenario small-batches``, in batches of 4 records that the mirror merges)."""
    values = make_values(args.record_size)
    batching: dict[str, int] = {"linger.ms": 50, "batch.size": args.batch_kib * 1024,
                                "batch.num.messages": 1_000_000}
    if args.scenario == "small-batches":  # a linger.ms=0 producer under light load
        batching = {"linger.ms": 0, "batch.size": 1024, "batch.num.messages": 4}
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": args.codec, "acks": "all",
                         "enable.idempotence": True, "queue.buffering.max.kbytes": 262144, **batching})
    start = time.monotonic()
    for i in range(args.records):
        while True:
            try:
                producer.produce(topic, values[i % len(values)], b"key-%d" % i, partition=i % args.partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError(f"seeding {topic} failed")
    return time.monotonic() - start


def mirror(setup: Setup, source_direct: str, target_direct: str, timeout: float) -> float:
    """Run ``mm2py run`` until the remote topic holds the whole source topic; its seconds."""
    src_probe, dst_probe = OffsetProbe(source_direct), OffsetProbe(target_direct)
    want = src_probe.ends(setup.topic)
    start = time.monotonic()
    try:
        with peer_process(mm2py_command(setup, "src", "dst"), setup.workdir / "mirror.out") as proc:
            while dst_probe.ends(f"src.{setup.topic}") != want:
                if proc.poll() is not None or time.monotonic() - start > timeout:
                    raise RuntimeError(f"the mirror did not catch up (see {setup.workdir / 'mirror.out'})")
                time.sleep(0.2)
            took = time.monotonic() - start
            time.sleep(1.5)  # one more progress commit and the offset syncs flushed, then SIGTERM
        return took
    finally:
        src_probe.close()
        dst_probe.close()


@dataclass
class Run:
    """One ``mm2py audit`` process."""

    exit: int
    verdict: str
    seconds: float  # wall time of the process
    compare: float | None  # the report's compare_seconds
    source_bytes: int
    cpu: float
    rss_mib: float
    brokers_cpu: float | None
    batches: int  # target batches found byte-identical
    records: int  # records compared one by one


def audit_once(setup: Setup, n: int, brokers: list[int]) -> Run:
    """One ``mm2py audit`` process: its report, exit status, wall time, CPU and peak RSS."""
    report_path = setup.workdir / f"audit-{n}.json"
    cmd = [sys.executable, "-m", "mm2py.cli", "audit", "-c", str(setup.workdir / "mm2py.properties"),
           "--json", str(report_path), "--quiet"]
    before = total_cpu(brokers)
    start = time.monotonic()
    with open(setup.workdir / f"audit-{n}.out", "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    parts = report.get("partitions", [])
    return Run(proc.returncode, report.get("verdict", "-"), wall, report.get("compare_seconds"),
               report.get("source_bytes", 0), usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
               total_cpu(brokers) - before if brokers else None,
               sum(p["batches_identical"] for p in parts), sum(p["records_compared"] for p in parts))


def print_runs(runs: list[Run]) -> None:
    head = ["run", "verdict", "exit", "seconds", "compare s", "MB/s", "compare MB/s", "CPU s",
            "peak RSS MiB", "brokers CPU s", "batches", "records"]
    rows = []
    for i, r in enumerate(runs, start=1):
        mb = r.source_bytes / 1e6
        rows.append([f"#{i}", r.verdict, str(r.exit), f"{r.seconds:.2f}",
                     f"{r.compare:.2f}" if r.compare else "-", f"{mb / r.seconds:.0f}",
                     f"{mb / r.compare:.0f}" if r.compare else "-", f"{r.cpu:.2f}", f"{r.rss_mib:.0f}",
                     "-" if r.brokers_cpu is None else f"{r.brokers_cpu:.1f}", f"{r.batches:,}",
                     f"{r.records:,}"])
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    for i, row in enumerate([head, *rows]):
        print("  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths,
                                                                                         strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="backlog", choices=["backlog", "small-batches"],
                    help="backlog: large batches, passed through by the mirror and compared batch by "
                         "batch; small-batches: 4-record batches, merged by the mirror and compared "
                         "record by record")
    ap.add_argument("--quick", action="store_true", help="200,000 records")
    ap.add_argument("--records", type=int, help="records to seed (default 2,000,000, or 500,000 with "
                                                "small batches; 200,000 with --quick)")
    ap.add_argument("--record-size", type=int, default=200, help="value bytes per record")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--codec", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--batch-kib", type=int, default=256, help="producer batch.size (uncompressed)")
    ap.add_argument("--rounds", type=int, default=3, help="audit runs (each its own row)")
    ap.add_argument("--source", help="source bootstrap servers (default: start a local cluster)")
    ap.add_argument("--target", help="target bootstrap servers (default: start a local cluster)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for the mirror")
    ap.add_argument("--workdir", type=Path, help="keep configs, logs and reports here (default: a temp dir)")
    args = ap.parse_args(argv)
    if bool(args.source) != bool(args.target):
        ap.error("give both --source and --target, or neither")
    args.records = args.records or (200_000 if args.quick else
                                    500_000 if args.scenario == "small-batches" else 2_000_000)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    compile_package()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mm2py-audit-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    clusters: list[KafkaCluster] = []
    ok = False
    try:
        if args.source:
            source, target, brokers = args.source, args.target, []
        else:
            print(f"starting two single-node Kafka clusters in {workdir} ...", flush=True)
            for name in ("source", "target"):
                clusters.append(KafkaCluster.create(name, workdir / name))
                clusters[-1].start(timeout=120)
            source, target = clusters[0].bootstrap, clusters[1].bootstrap
            brokers = [n.pid for c in clusters for n in c.nodes if n.pid]
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        create_topic(source, topic, args.partitions)
        took = seed(source, topic, args)
        setup = Setup(source, target, topic, workdir)
        print(f"seeded {topic}: {args.records:,} records of {args.record_size} B, {args.codec}, "
              f"{args.partitions} partitions, {args.scenario}, in {took:.1f} s; mirroring ...", flush=True)
        print(f"mirrored by mm2py in {mirror(setup, source, target, args.timeout):.1f} s", flush=True)
        runs = []
        for n in range(1, args.rounds + 1):
            runs.append(audit_once(setup, n, brokers))
            print(f"audit #{n}: {runs[-1].verdict} in {runs[-1].seconds:.2f} s", flush=True)
        print(f"\n{args.scenario}: {args.records:,} records, {runs[0].source_bytes / 1e6:.1f} MB stored "
              f"({args.codec}), {args.partitions} partitions, {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.2f} after the runs\n")
        print_runs(runs)
        ok = all(r.exit == 0 for r in runs)
        return 0 if ok else 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for c in reversed(clusters):
            c.stop()
        if ok and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"configs, logs and reports kept in {workdir}")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("interrupted; the mirror and the clusters stopped", file=sys.stderr)
        sys.exit(130)
