"""What ``latency_bench.py`` measures and prints: per-peer results, the target consumer's tally of
the records it sees, the read-back of the source's window, the side-by-side table."""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)
from rate_producer import parse_value

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
        """Nearest-rank percentile over every window record: those that had not arrived when the
        script stopped waiting rank above all others, as infinity (printed "late")."""
        lat, n = self.latencies_ms, len(self.latencies_ms) + self.missing
        if not n:
            return None
        rank = max(0, math.ceil(q * n) - 1)
        return lat[rank] if rank < len(lat) else math.inf


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


# ------------------------------------------------------------------------------------ report
def tally(res: Result, received: Received, expected: set[int], csv: Path) -> None:
    """Compare what the target consumer saw with the window's records on the source (``expected``);
    writes each window record's latency to ``csv`` for a closer look at the tail."""
    seen = received.first
    res.source_records = len(expected)
    res.missing = len(expected - seen.keys())
    res.dupes = sum(n for seq, n in received.extra.items() if seq in expected)
    res.unknown = sum(1 for seq, (sent, _, _) in seen.items()
                      if res.window[0] <= sent < res.window[1] and seq not in expected)
    res.bad_timestamps = received.bad_timestamps
    both = sorted(expected & seen.keys())
    res.window_latencies = [seen[seq][:2] for seq in both]
    res.latencies_ms = sorted(lat / 1000 for _, lat in res.window_latencies)
    with open(csv, "w") as out:
        out.write("seq,partition,sent_us,latency_us\n")
        for seq in both:
            sent, lat, part = seen[seq]
            out.write(f"{seq},{part},{sent},{lat}\n")


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else "late" if value == math.inf else format(value, spec)


def print_report(results: list[Result]) -> None:
    head = ("peer", "startup s", "startup CPU s", "src rec/s", "records", "not arrived", "dupes",
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
            fmt(r.percentile(1.0), ".1f"),
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
            phase = "at full rate" if p.get("full_rate") else "never past the start-up trickle:"
            print(f"{r.peer}: producer {p.get('produced', 0):,} records; {phase} "
                  f"{p.get('rate', 0.0):,.0f}/s over {p.get('seconds', 0.0):.0f}s, at most "
                  f"{behind_ms:.0f} ms behind schedule"
                  + (f", errors {p['errors']}" if p.get("errors") else ""))
        if r.error:
            print(f"{r.peer}: FAILED - {r.error}")
        if (tenths := r.tenths()) is not None:
            first, last = tenths
            settled = not first > 2 * last + 50  # (NaN: too few records to tell)
            print(f"{r.peer}: p50 of the records sent in the first / last tenth of the window: {first:.1f} / "
                  f"{last:.1f} ms" + ("" if settled else " - STILL CATCHING UP when the window began "
                                      "(a longer --warmup measures the steady state)"))
        problems = [f"{n:,} {what}" for n, what in (
                    (r.missing, "not arrived when the script stopped waiting (late or lost)"),
                    (r.dupes, "duplicates"),
                    (r.unknown, "unknown records"), (r.bad_timestamps, "changed timestamps")) if n]
        if problems:
            print(f"{r.peer}: NOT shown exactly once - " + ", ".join(problems))
