"""What ``scale_bench.py`` builds on: the topic layout, seeding a backlog into many partitions, end
offsets of many partitions in one request, the brokers' request counters read over JMX with Kafka's
own ``JmxTool``, the trickle producer, and the side-by-side table.

The trickle producer runs as its own process (its CPU is then neither the mirror's nor the
script's)::

    python benchmarks/scale_support.py trickle --bootstrap HOST:PORT --topics t0:50,t1:50 \\
        --rate 200 --seconds 120 --first-seq 40000 --stats stats.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_support import make_values
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from rate_producer import HEADER, parse_value

TP = tuple[str, int]
Reading = tuple[float, dict[str, int]]  # a broker's clock (s) and its request counters
#: the broker's request meters (one per request type and version, created at the first request)
REQUESTS = ("Fetch", "Produce")
#: every request type's meter (each version its own bean: summed per type by ``parse_jmx``)
JMX_BEAN = "kafka.network:type=RequestMetrics,name=RequestsPerSec,*"


# ------------------------------------------------------------------------------ topics and data
def layout(prefix: str, topics: int, partitions: int) -> dict[str, int]:
    """``topics`` topics ``<prefix><i>`` sharing ``partitions`` partitions (the first ones get one
    more when they do not divide evenly)."""
    base, extra = divmod(partitions, topics)
    return {f"{prefix}{i}": base + (i < extra) for i in range(topics)}


def partitions_of(topics: dict[str, int]) -> list[TP]:
    return [(t, p) for t, n in topics.items() for p in range(n)]


def sample(topics: dict[str, int], count: int) -> list[TP]:
    """About ``count`` partitions spread over every topic: the lowest-numbered of each topic."""
    each = max(1, math.ceil(count / len(topics)))
    return [(t, p) for t, n in topics.items() for p in range(min(each, n))]


@dataclass
class Topics:
    """One peer's source topics (name -> partitions) and their names on the target."""

    source: dict[str, int]
    alias: str  # the source alias: the default replication policy writes <alias>.<topic>

    def tgt(self, tp: TP) -> TP:
        return f"{self.alias}.{tp[0]}", tp[1]

    def on_target(self, offsets: dict[TP, int]) -> dict[TP, int]:
        return {self.tgt(tp): n for tp, n in offsets.items()}


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


class Cluster:
    """An admin client of one cluster, and the end offsets of many partitions in one call."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = admin_client(bootstrap)

    def end_offsets(self, parts: Iterable[TP], timeout: float = 30.0) -> dict[TP, int] | None:
        """Every partition's end offset (one ListOffsets per broker); None while any of them is not
        there yet (topic not created, no leader). A failed call replaces the admin client: librdkafka's
        client went on failing with UNKNOWN_TOPIC_OR_PART for topics that were being created when it
        first asked, long after a fresh client saw them."""
        request = {TopicPartition(t, p): OffsetSpec.latest() for t, p in parts}
        try:
            futures = self.admin.list_offsets(request, request_timeout=timeout)
            return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
        except KafkaException:
            self.admin = admin_client(self.bootstrap)
            return None

    def holds_any(self, parts: Iterable[TP], timeout: float = 10.0) -> bool:
        """Whether any of ``parts`` holds a record. Asks only the partitions the cluster's metadata
        lists with a leader (librdkafka fails a whole ListOffsets call for one partition not created
        yet), and a partition whose answer is an error counts as holding none: while a target's
        just-created partitions got their leaders one by one (2,000 of them, seconds), one such
        error had made the whole answer "none", and the first record was seen only once every
        partition had a leader (18.1 s after the start, where the first lease's first batch was
        acknowledged at 12.7 s). A failed call replaces the admin client, as in ``end_offsets``."""
        try:
            led = {(t, p) for t, m in self.admin.list_topics(timeout=timeout).topics.items()
                   if m.error is None for p, pm in m.partitions.items() if pm.leader >= 0}
            request = {TopicPartition(t, p): OffsetSpec.latest() for t, p in parts if (t, p) in led}
            if not request:
                return False
            futures = self.admin.list_offsets(request, request_timeout=timeout)
        except KafkaException:
            self.admin = admin_client(self.bootstrap)
            return False
        for f in futures.values():
            with contextlib.suppress(KafkaException):
                if f.result().offset > 0:
                    return True
        return False


def create_topics(cluster: Cluster, topics: dict[str, int], timeout: float = 300.0) -> None:
    """Create ``topics`` (replication factor 1) and wait until every partition has a leader. At most
    4,000 partitions a request: a KRaft controller refuses a request of more than 10,000 metadata
    records ("excessively large batch operation"), one per partition and topic."""
    batches: list[list[NewTopic]] = [[]]
    for t, n in topics.items():
        if batches[-1] and sum(x.num_partitions for x in batches[-1]) + n > 4000:
            batches.append([])
        batches[-1].append(NewTopic(t, n, 1))
    for batch in batches:
        for fut in cluster.admin.create_topics(batch, operation_timeout=timeout,
                                               request_timeout=timeout).values():
            fut.result()
    deadline = time.monotonic() + timeout
    while cluster.end_offsets(partitions_of(topics)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(topics)} topics created, not all partitions ready after {timeout:.0f}s")
        time.sleep(0.5)


def delete_topics(cluster: Cluster, names: list[str], data_dirs: Iterable[Path] = (),
                  timeout: float = 900.0) -> None:
    """Delete ``names`` (those that exist); wait until the cluster no longer lists them and, given a
    local broker's log directories, until their partitions' directories are gone: a deleted partition
    keeps its directory (renamed ``<name>-delete``) and an open file up to minutes later, and 10,000
    of them with the next peer's 10,000 met this machine's open-files limit."""
    admin, deadline = cluster.admin, time.monotonic() + timeout
    if present := set(admin.list_topics(timeout=30).topics) & set(names):
        for fut in admin.delete_topics(sorted(present), operation_timeout=60).values():
            fut.result()
    prefixes = tuple(f"{t}-" for t in names)
    while time.monotonic() < deadline and (
            set(admin.list_topics(timeout=30).topics) & present
            or any(d.name.startswith(prefixes) for log_dir in data_dirs for d in log_dir.iterdir())):
        time.sleep(0.5)


def record(seq: int, send_us: int, filler: bytes) -> bytes:
    """The value format of ``rate_producer.py`` (``parse_value`` reads it back)."""
    return b"%012d %016d " % (seq, send_us) + filler


def seed(bootstrap: str, parts: list[TP], per_partition: int, record_size: int, codec: str,
         first_seq: int = 0) -> int:
    """``per_partition`` records into every partition, in rounds of one record per partition with
    a flush after each round: one stored batch per record, as a trickle leaves a partition. Returns
    the next sequence number."""
    fillers = [v[HEADER:] for v in make_values(record_size, 256)]
    errors: list[str] = []

    def check(err: object, _msg: object) -> None:
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                         "acks": "all", "enable.idempotence": True, "log_level": 3,
                         "queue.buffering.max.messages": max(100_000, 2 * len(parts))})
    seq = first_seq
    for _ in range(per_partition):
        send_us = time.time_ns() // 1000
        for topic, p in parts:
            producer.produce(topic, record(seq, send_us, fillers[seq % len(fillers)]), b"key-%d" % seq,
                             partition=p, timestamp=send_us // 1000, on_delivery=check)
            seq += 1
        if producer.flush(120) or errors:
            raise RuntimeError(f"seeding {bootstrap} failed: {errors or 'records left unsent'}")
    return seq


def read_seqs(bootstrap: str, ranges: dict[TP, tuple[int, int]],
              where: dict[int, TP] | None = None) -> set[int]:
    """Sequence numbers of the records in ``ranges`` ([start, end) offsets) of a cluster's partitions
    (each one's partition into ``where`` when given)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"scan-{uuid.uuid4()}",
                         "enable.auto.commit": False, "log_level": 3})
    try:
        todo = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
        consumer.assign([TopicPartition(t, p, r[0]) for (t, p), r in todo.items()])
        out: set[int] = set()
        deadline = time.monotonic() + 120
        while todo and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                if m.error() is not None:
                    raise RuntimeError(f"scan of {bootstrap}: {m.error()}")
                tp, offset = (m.topic() or "", m.partition() or 0), m.offset() or 0
                if tp in todo and offset < todo[tp][1]:
                    seq = parse_value(m.value() or b"")[0]
                    out.add(seq)
                    if where is not None:
                        where[seq] = tp
                    if offset + 1 >= todo[tp][1]:
                        del todo[tp]
        if todo:
            raise RuntimeError(f"scan of {bootstrap}: {len(todo)} partitions not read to their end in 120s")
        return out
    finally:
        consumer.close()


# --------------------------------------------------------------------------------- broker JMX
def jmx_jvm_args(port: int) -> list[str]:
    """A broker JVM's remote JMX agent on loopback ``port``, no authentication (local benchmark)."""
    return [f"-Dcom.sun.management.jmxremote.port={port}", f"-Dcom.sun.management.jmxremote.rmi.port={port}",
            "-Dcom.sun.management.jmxremote.host=127.0.0.1", "-Djava.rmi.server.hostname=127.0.0.1",
            "-Dcom.sun.management.jmxremote.authenticate=false", "-Dcom.sun.management.jmxremote.ssl=false"]


def parse_jmx(text: str) -> Reading | None:
    """(broker clock in s, requests received so far per type, summed over versions) from JmxTool's
    one-time csv output (``time,"<ms>"`` then ``<object name>:Count,"<n>"`` lines)."""
    when, counts = None, dict.fromkeys(REQUESTS, 0)
    for line in text.splitlines():
        key, _, value = line.rpartition(",")
        value = value.strip().strip('"')
        if key == "time":
            when = int(value) / 1000
        elif key.endswith(":Count") and (m := re.search(r"[,:]request=([^,:]+)", key)):
            counts[m.group(1)] = counts.get(m.group(1), 0) + int(float(value))
    return None if when is None else (when, counts)


def request_counts(jmx_ports: list[int]) -> list[Reading | None]:
    """Each broker's request counters (``parse_jmx``), read at once by one JmxTool run per broker."""
    from mm2py.kafka_local import resolve_jars
    from mm2py.kafka_local.jars import java_executable

    libs = resolve_jars()
    beans = ["--object-name", JMX_BEAN]

    def one(port: int) -> Reading | None:
        cmd = [java_executable(), "-Xmx64m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp",
               f"{libs}/*", "org.apache.kafka.tools.JmxTool", "--one-time", "true", "--report-format",
               "csv", "--attributes", "Count", "--jmx-url",
               f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi", *beans]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return None
        return parse_jmx(out.stdout) if out.returncode == 0 else None

    with ThreadPoolExecutor(len(jmx_ports) or 1) as pool:
        return list(pool.map(one, jmx_ports))


def rates(before: Reading | None, after: Reading | None) -> dict[str, float]:
    """Requests per second between two ``parse_jmx`` readings."""
    if before is None or after is None or after[0] <= before[0]:
        return {}
    return {r: (after[1].get(r, 0) - before[1].get(r, 0)) / (after[0] - before[0])
            for r in sorted(after[1].keys() | set(REQUESTS))}


# ------------------------------------------------------------------------------ trickle producer
def trickle(argv: list[str]) -> int:
    """Records at ``--rate`` for ``--seconds`` from ``--start-at`` (epoch s), round-robin over the
    partitions in a fixed shuffled order (each gets an equal share, no topic waits for another).
    Writes its counters, with the Produce requests librdkafka sent, as JSON to ``--stats``."""
    ap = argparse.ArgumentParser(prog="scale_support.py trickle")
    for name in ("--bootstrap", "--topics", "--codec"):
        ap.add_argument(name, required=True)
    for name in ("--rate", "--seconds", "--start-at", "--linger-ms"):
        ap.add_argument(name, type=float, required=True)
    for name in ("--record-size", "--first-seq"):
        ap.add_argument(name, type=int, required=True)
    ap.add_argument("--stats", type=Path, required=True)
    args = ap.parse_args(argv)
    parts = partitions_of({t: int(n) for t, _, n in (x.rpartition(":") for x in args.topics.split(","))})
    random.Random(7).shuffle(parts)
    fillers = [v[HEADER:] for v in make_values(args.record_size, 256)]
    stats: dict[str, object] = {}
    counts = {"delivered": 0, "errors": 0}

    def on_delivery(err: object, _msg: object) -> None:
        counts["errors" if err is not None else "delivered"] += 1

    def on_stats(text: str) -> None:
        brokers = json.loads(text).get("brokers", {}).values()
        stats["produce_requests"] = sum(b.get("req", {}).get("Produce", 0) for b in brokers)

    producer = Producer({"bootstrap.servers": args.bootstrap, "compression.type": args.codec,
                         "linger.ms": args.linger_ms, "acks": "all", "enable.idempotence": True,
                         "statistics.interval.ms": 200, "stats_cb": on_stats, "log_level": 3})
    producer.list_topics(timeout=30)  # connected before the first record is due
    while time.time() < args.start_at:
        producer.poll(min(0.05, max(0.0, args.start_at - time.time())))
    start, sent, behind, late = time.monotonic(), 0, 0.0, time.time() - args.start_at
    total = math.ceil(args.seconds * args.rate)
    while sent < total:
        due = min(int((time.monotonic() - start) * args.rate) + 1, total)
        behind = max(behind, (due - 1 - sent) / args.rate)
        while sent < due:
            seq, send_us = args.first_seq + sent, time.time_ns() // 1000
            topic, p = parts[sent % len(parts)]
            producer.produce(topic, record(seq, send_us, fillers[seq % len(fillers)]), b"key-%d" % seq,
                             partition=p, timestamp=send_us // 1000, on_delivery=on_delivery)
            sent += 1
        producer.poll(0)
        time.sleep(max(0.0, min(0.05, start + sent / args.rate - time.monotonic())))
    sending, left = time.monotonic() - start, producer.flush(30)
    end = time.monotonic() + 0.5  # one more statistics callback after the last request
    while time.monotonic() < end:
        producer.poll(0.05)
    args.stats.write_text(json.dumps({**stats, **counts, "produced": sent, "undelivered": left,
                                      "seconds": sending, "max_behind_s": behind,
                                      "late_s": late}))
    return 0 if not counts["errors"] and not left else 1


# ------------------------------------------------------------------------------------- result
@dataclass
class Row:
    """One peer's figures (``None``: not measured)."""

    peer: str
    catchup_s: float | None = None  # peer start to the whole backlog on the target
    catchup_cpu: float | None = None
    first_s: float | None = None  # peer start to the first record on the target
    window_s: float = 0.0
    cpu: float | None = None  # the mirror's process tree over the window
    #: that CPU by role (``bench_support.tree_cpu_parts``): main process, driver JVM, executors
    cpu_parts: dict[str, float] = field(default_factory=dict)
    #: a Spark peer: the leases its driver had started, at each of its 30-second status lines
    leases_started: list[int] = field(default_factory=list)
    rss_mib: float | None = None
    broker_cpu: tuple[float, float] | None = None  # source, target over the window
    src_rates: dict[str, float] = field(default_factory=dict)  # requests/s at the source broker
    tgt_rates: dict[str, float] = field(default_factory=dict)
    producer_produce_s: float | None = None  # the trickle producer's share of the source's Produce/s
    jmx_span: float = 0.0  # s between the two readings of the request counters
    metrics_port: int | None = None  # mm2py's /metrics (its own request counts)
    own_rates: dict[str, float] = field(default_factory=dict)  # "source Fetch" -> the peer's own requests/s
    #: a Spark peer: (mirror host, executor) -> its own source Fetch/s over the window
    host_fetch: dict[tuple[str, str], float] = field(default_factory=dict)
    sent: int = 0  # trickle records on the source
    by_window_end: int | None = None  # trickle records on the target when the window ended
    after_drain: int | None = None
    latencies_ms: list[float] = field(default_factory=list)  # sampled partitions, sorted
    not_arrived: int = 0  # sampled records never seen
    missing: int = 0  # per partition: source end - target end where positive
    dupes: int = 0  # where negative
    bad_partitions: int = 0
    problems: list[str] = field(default_factory=list)
    error: str = ""
    kill: Any = None  # --kill-worker-at: the worker_kill.WorkerKill of this peer's window

    def percentile(self, q: float) -> float | None:
        """Nearest rank over the sampled records; those never seen rank above all (infinity)."""
        n = len(self.latencies_ms) + self.not_arrived
        if not n:
            return None
        rank = max(0, math.ceil(q * n) - 1)
        return self.latencies_ms[rank] if rank < len(self.latencies_ms) else math.inf

    @property
    def ok(self) -> bool:
        return not (self.error or self.missing or self.dupes or self.problems) and self.catchup_s is not None


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else "late" if value == math.inf else format(value, spec)


def print_table(rows: list[Row]) -> None:
    head = ("peer", "first record s", "catch-up s", "catch-up CPU s", "CPU s", "CPU %", "peak RSS MiB",
            "src broker CPU s", "tgt broker CPU s", "src Fetch/s", "src Produce/s", "tgt Produce/s", "sent",
            "by window end", "after drain", "p50 ms", "p99 ms", "max ms", "missing", "dupes")
    table: list[tuple[str, ...]] = [head]
    for r in rows:
        table.append((
            r.peer, fmt(r.first_s, ".1f"), fmt(r.catchup_s, ".1f"), fmt(r.catchup_cpu, ".1f"),
            fmt(r.cpu, ".1f"),
            fmt(None if r.cpu is None or not r.window_s else 100 * r.cpu / r.window_s, ".0f"),
            fmt(r.rss_mib, ".0f"), *(fmt(c, ".1f") for c in (r.broker_cpu or (None, None))),
            fmt(r.src_rates.get("Fetch"), ",.0f"), fmt(r.src_rates.get("Produce"), ",.0f"),
            fmt(r.tgt_rates.get("Produce"), ",.0f"), f"{r.sent:,}" if r.sent else "-",
            fmt(r.by_window_end, ","), fmt(r.after_drain, ","),
            *(fmt(r.percentile(q), ".1f") for q in (0.5, 0.99, 1.0)),
            fmt(r.missing if r.catchup_s is not None else None, ","),
            fmt(r.dupes if r.catchup_s is not None else None, ",")))
    widths = [max(len(x) for x in col) for col in zip(*table, strict=True)]
    for i, line in enumerate(table):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(line, widths,
                                                                                          strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for r in rows:
        if r.producer_produce_s is not None and r.src_rates:
            print(f"{r.peer}: request rates over {r.jmx_span:.1f} s; of the source's Produce/s, "
                  f"{r.producer_produce_s:,.0f} are the trickle producer's, "
                  f"{r.src_rates['Produce'] - r.producer_produce_s:,.0f} the mirror's")
        if len([v for v in r.cpu_parts.values() if v >= 0.05]) > 1:
            print(f"{r.peer}: window CPU s by process: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in sorted(r.cpu_parts.items()) if v >= 0.05))
        if r.leases_started:
            print(f"{r.peer}: Spark leases started, at each 30-second status line: "
                  + ", ".join(str(n) for n in r.leases_started))
        for side, got in (("source", r.src_rates), ("target", r.tgt_rates)):
            if got:
                print(f"{r.peer}: {side} broker's requests/s by type over the window: "
                      + ", ".join(f"{k} {v:,.1f}" for k, v in sorted(got.items(), key=lambda kv: -kv[1])
                                  if v >= 0.1))
        if r.own_rates:
            print(f"{r.peer}: its own requests/s over the window: "
                  + ", ".join(f"{k} {v:,.1f}" for k, v in r.own_rates.items() if v >= 0.05))
        if r.host_fetch:
            print(f"{r.peer}: source Fetch/s of each mirror host over the window: "
                  + ", ".join(f"{h} ({e}) {v:,.1f}" for (h, e), v in r.host_fetch.items()))
        if r.latencies_ms or r.not_arrived:
            print(f"{r.peer}: latency over {len(r.latencies_ms) + r.not_arrived:,} records of the sampled "
                  "partitions")
        if r.kill is not None:
            print(r.kill.summary(r.peer))
        for what in ([f"FAILED - {r.error}"] if r.error else []) + r.problems:
            print(f"{r.peer}: {what}")
        if r.missing or r.dupes:
            print(f"{r.peer}: NOT exactly once - {r.missing:,} records missing, {r.dupes:,} duplicated, "
                  f"in {r.bad_partitions:,} partitions")


if __name__ == "__main__":
    if sys.argv[1:2] != ["trickle"]:
        sys.exit("usage: scale_support.py trickle ...")
    sys.exit(trickle(sys.argv[2:]))
