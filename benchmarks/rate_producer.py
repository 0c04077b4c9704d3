"""The live traffic of ``latency_bench.py``: records at a fixed rate until SIGTERM (its own process).

Record ``n`` goes to partition ``n % partitions`` with key ``key-<n>`` and a value that starts with
``"<n:012d> <send time in µs since the epoch:016d> "`` and is padded to ``--record-size`` bytes
(half random hex, half repetitive, like ``mirror_bench.py``'s values). Its CreateTime is the same
clock reading in ms. With ``--start-rate`` it begins at that rate (a trickle while a mirror starts)
and switches to ``--rate`` on SIGUSR1. On exit it flushes and writes its counters as JSON to
``--stats`` (``rate`` and ``max_behind_s`` are those of the full-rate phase)::

    python benchmarks/rate_producer.py --bootstrap HOST:PORT --topic T --rate 2000 --partitions 6 \\
        --stats stats.json
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench_support import make_values
from confluent_kafka import Producer

HEADER = 30  # b"%012d %016d " % (seq, send_us)


def parse_value(value: bytes) -> tuple[int, int]:
    """``(sequence number, send time in µs)`` of a value written by this producer."""
    return int(value[:12]), int(value[13:29])


class Paced:
    """A producer of numbered records on a schedule; the rate can change while it runs."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stop = False
        self.full = False  # switched to --rate
        self.fillers = [v[HEADER:] for v in make_values(args.record_size, 1024)]
        self.producer = Producer({"bootstrap.servers": args.bootstrap, "compression.type": args.codec,
                                  "linger.ms": args.linger_ms, "acks": "all", "enable.idempotence": True})
        self.errors: list[str] = []
        self.delivered = 0
        self.seq = 0

    def on_delivery(self, err: object, _msg: object) -> None:
        if err is None:
            self.delivered += 1
        elif len(self.errors) < 10:
            self.errors.append(str(err))

    def send(self) -> None:
        """One record, stamped with the time it is handed to the client."""
        seq, send_us = self.seq, time.time_ns() // 1000
        while True:
            try:
                self.producer.produce(
                    self.args.topic, b"%012d %016d " % (seq, send_us) + self.fillers[seq % len(self.fillers)],
                    b"key-%d" % seq, partition=seq % self.args.partitions, timestamp=send_us // 1000,
                    on_delivery=self.on_delivery)
                break
            except BufferError:  # the local queue is full: serve callbacks, retry with a new send time
                self.producer.poll(0.01)
                send_us = time.time_ns() // 1000
        self.seq += 1

    def run(self) -> dict[str, Any]:
        """Send on schedule until ``stop``; returns the counters."""
        rate = self.args.start_rate or self.args.rate
        phase_start, phase_seq, behind = time.monotonic(), 0, 0.0
        while not self.stop:
            if self.full and rate != self.args.rate:  # a new schedule from now on
                rate, phase_start, phase_seq, behind = self.args.rate, time.monotonic(), self.seq, 0.0
            due = phase_seq + int((time.monotonic() - phase_start) * rate) + 1  # sent by now, by schedule
            behind = max(behind, (due - 1 - self.seq) / rate)  # how late the oldest of them is
            while self.seq < due and not self.stop:
                self.send()
            self.producer.poll(0)
            time.sleep(max(0.0, min(0.1, phase_start + (self.seq - phase_seq) / rate - time.monotonic())))
        elapsed = time.monotonic() - phase_start
        left = self.producer.flush(30)
        return {"produced": self.seq, "delivered": self.delivered, "undelivered": left,
                "errors": self.errors, "seconds": elapsed, "full_rate": rate == self.args.rate,
                "rate": (self.seq - phase_seq) / elapsed if elapsed else 0.0, "max_behind_s": behind}


def run(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="rate_producer.py")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--rate", type=float, required=True, help="records per second")
    ap.add_argument("--start-rate", type=float, default=0.0,
                    help="records per second until SIGUSR1 (default: --rate from the start)")
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--record-size", type=int, default=200)
    ap.add_argument("--codec", default="lz4")
    ap.add_argument("--linger-ms", type=float, default=5.0)
    ap.add_argument("--stats", type=Path, required=True, help="write the counters here (JSON) on exit")
    args = ap.parse_args(argv)
    if args.rate <= 0 or args.start_rate < 0 or args.partitions < 1 or args.record_size < HEADER:
        ap.error(f"need --rate > 0, --start-rate >= 0, --partitions >= 1, --record-size >= {HEADER}")
    paced = Paced(args)

    def on_term(*_: object) -> None:
        paced.stop = True

    def on_usr1(*_: object) -> None:
        paced.full = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGUSR1, on_usr1)
    stats = paced.run()
    args.stats.write_text(json.dumps(stats))
    return 0 if not stats["errors"] and not stats["undelivered"] else 1


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
