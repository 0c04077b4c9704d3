"""The live traffic of ``latency_bench.py``: records at a fixed rate until SIGTERM (its own process).

Record ``n`` goes to partition ``n % partitions`` with key ``key-<n>`` and a value that starts with
``"<n:012d> <send time in µs since the epoch:016d> "`` and is padded to ``--record-size`` bytes
(half random hex, half repetitive, like ``mirror_bench.py``'s values). Its CreateTime is the same
clock reading in ms. On exit it flushes and writes its counters as JSON to ``--stats``::

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

from bench_support import make_values
from confluent_kafka import Producer

HEADER = 30  # b"%012d %016d " % (seq, send_us)


def parse_value(value: bytes) -> tuple[int, int]:
    """``(sequence number, send time in µs)`` of a value written by this producer."""
    return int(value[:12]), int(value[13:29])


def run(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="rate_producer.py")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--rate", type=float, required=True, help="records per second")
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--record-size", type=int, default=200)
    ap.add_argument("--codec", default="lz4")
    ap.add_argument("--linger-ms", type=float, default=5.0)
    ap.add_argument("--stats", type=Path, required=True, help="write the counters here (JSON) on exit")
    args = ap.parse_args(argv)
    if args.rate <= 0 or args.partitions < 1 or args.record_size < HEADER:
        ap.error(f"need --rate > 0, --partitions >= 1, --record-size >= {HEADER}")
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    fillers = [v[HEADER:] for v in make_values(args.record_size, 1024)]
    producer = Producer({"bootstrap.servers": args.bootstrap, "compression.type": args.codec,
                         "linger.ms": args.linger_ms, "acks": "all", "enable.idempotence": True})
    errors: list[str] = []
    delivered = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        elif len(errors) < 10:
            errors.append(str(err))

    produce, topic, parts, rate = producer.produce, args.topic, args.partitions, args.rate
    seq, behind = 0, 0.0
    start = time.monotonic()
    while not stop:
        due = int((time.monotonic() - start) * rate) + 1  # records that should have been sent by now
        behind = max(behind, (due - 1 - seq) / rate)  # how late the oldest of them is
        while seq < due and not stop:
            send_us = time.time_ns() // 1000
            try:
                produce(topic, b"%012d %016d " % (seq, send_us) + fillers[seq % len(fillers)],
                        b"key-%d" % seq, partition=seq % parts, timestamp=send_us // 1000,
                        on_delivery=on_delivery)
            except BufferError:  # the local queue is full: serve callbacks, retry with a new send time
                producer.poll(0.01)
                continue
            seq += 1
        producer.poll(0)
        time.sleep(max(0.0, start + seq / rate - time.monotonic()))
    elapsed = time.monotonic() - start
    left = producer.flush(30)
    args.stats.write_text(json.dumps({
        "produced": seq, "delivered": delivered, "undelivered": left, "errors": errors,
        "seconds": elapsed, "rate": seq / elapsed if elapsed else 0.0, "max_behind_s": behind,
    }))
    return 0 if not errors and not left else 1


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
