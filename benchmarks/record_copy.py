"""The record-level copy peer of ``mirror_bench.py``: a naive Python mirror (confluent-kafka).

Every record is consumed (decompressed), turned into Python objects and produced again
(recompressed). Run by ``mirror_bench.py`` as its own process::

    python benchmarks/record_copy.py --source HOST:PORT --target HOST:PORT --topic T --dest T2 --codec lz4
"""

from __future__ import annotations

import argparse
import signal
import sys
import uuid

from bench_support import create_topic
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition


def record_copy(argv: list[str]) -> int:
    """The naive Python mirror: every record consumed, turned into objects and produced again."""
    ap = argparse.ArgumentParser(prog="record_copy.py")
    for name in ("--source", "--target", "--topic", "--dest", "--codec"):
        ap.add_argument(name, required=True)
    ap.add_argument("--batch-kib", type=int, default=256)
    args = ap.parse_args(argv)
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    consumer = Consumer({"bootstrap.servers": args.source, "group.id": f"record-copy-{uuid.uuid4()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    parts = sorted(consumer.list_topics(args.topic, timeout=10).topics[args.topic].partitions)
    create_topic(args.target, args.dest, len(parts))
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in parts])
    producer = Producer({"bootstrap.servers": args.target, "compression.type": args.codec,
                         "acks": "all", "enable.idempotence": True, "linger.ms": 20,
                         "batch.size": args.batch_kib * 1024, "batch.num.messages": 1_000_000})
    produce = producer.produce
    while not stop:
        for m in consumer.consume(10_000, 0.5):
            if m.error():
                raise KafkaException(m.error())
            while True:
                try:
                    produce(args.dest, m.value(), m.key(), partition=m.partition() or 0,
                            timestamp=m.timestamp()[1], headers=m.headers())
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    producer.flush(30)
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(record_copy(sys.argv[1:]))
