"""Throughput of the RecordBatch codec paths, per compression codec.

Not a test. Builds a record set of batches of ``--record-size`` byte records for each codec and
times, over the whole set:

* ``iter+verify+rebase`` - the shallow-mirroring hot path: walk, CRC-check, rewrite baseOffset;
* ``strip (verify)`` / ``strip (no verify)`` - producer state strip with CRC recompute;
* ``crop (half)`` - drop the first half of each batch (first-batch cropping);
* ``decode+re-encode`` - the record-level copy a classic consumer/producer mirror pays;
* ``split (quarters)`` - each batch split into pieces of at most a quarter of its size, as the
  mirror splits a batch larger than the target topic accepts (``protocol/batch_split.py``).

MB/s counts the source batch bytes processed. Usage::

    python benchmarks/batch_codec_bench.py [--batches 200] [--records 16] [--record-size 1024]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from mm2py.protocol.batch_edit import crop, strip_producer_state
from mm2py.protocol.batch_split import split_batch
from mm2py.protocol.compression import Codec
from mm2py.protocol.record_codec import Record, build_batch, decode_records
from mm2py.protocol.records import RecordBatch, iter_batches


def make_record_set(codec: Codec, batches: int, records: int, record_size: int) -> bytes:
    out = []
    offset = 0
    for _ in range(batches):
        recs = [
            Record(
                offset_delta=i,
                timestamp_delta=i,
                key=f"key-{offset + i}".encode(),
                # half random, half repetitive: compresses roughly 2:1 like typical payloads
                value=os.urandom(record_size // 4).hex()[: record_size // 2].encode()
                + b"x" * (record_size - record_size // 2),
                headers=(("trace", b"abc123"),),
            )
            for i in range(records)
        ]
        out.append(
            build_batch(
                recs,
                codec=codec,
                base_offset=offset,
                base_timestamp=1_700_000_000_000,
                producer_id=42,
                producer_epoch=0,
                base_sequence=offset,
            )
        )
        offset += records
    return b"".join(out)


#: the wall-clock seconds the last :func:`timed` ran (its CPU seconds are measured around it)
_last_elapsed = [0.0]


def timed(fn: Callable[[], object], min_seconds: float) -> float:
    """Seconds per call of ``fn`` (repeats until ``min_seconds`` elapsed)."""
    calls = 0
    start = time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            _last_elapsed[0] = elapsed
            return elapsed / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--records", type=int, default=16, help="records per batch")
    ap.add_argument("--record-size", type=int, default=1024, help="value bytes per record")
    ap.add_argument("--min-seconds", type=float, default=0.5, help="time budget per measurement")
    ap.add_argument("--codecs", default="none,gzip,snappy,lz4,zstd")
    args = ap.parse_args()

    codecs = [Codec[name.strip().upper()] for name in args.codecs.split(",")]
    print(
        f"{args.batches} batches x {args.records} records x {args.record_size} B values "
        f"(uncompressed payload {args.batches * args.records * args.record_size / 1e6:.1f} MB)"
    )
    header = (f"{'codec':<7} {'operation':<20} {'MB/s':>10} {'batches/s':>12} {'us/batch':>10}"
              f" {'CPU-s/GB':>9}")
    print(header)
    print("-" * len(header))
    for codec in codecs:
        data = make_record_set(codec, args.batches, args.records, args.record_size)
        batches = list(iter_batches(data))
        half = args.records // 2

        def hot_path(data: bytes = data) -> None:
            for b in iter_batches(data):
                b.verify()
                b.rebased(0)

        def strip_verify(batches: list[RecordBatch] = batches) -> None:
            for b in batches:
                strip_producer_state(b)

        def strip_no_verify(batches: list[RecordBatch] = batches) -> None:
            for b in batches:
                strip_producer_state(b, verify=False)

        def crop_half(batches: list[RecordBatch] = batches, half: int = half) -> None:
            for b in batches:
                crop(b, b.base_offset + half)

        def reencode(batches: list[RecordBatch] = batches, codec: Codec = codec) -> None:
            for b in batches:
                build_batch(
                    decode_records(b),
                    codec=codec,
                    base_offset=b.base_offset,
                    base_timestamp=b.base_timestamp,
                )

        def split_quarters(batches: list[RecordBatch] = batches) -> None:
            for b in batches:
                split_batch(b, b.size // 4 + 1)

        ops: list[tuple[str, Callable[[], None]]] = [
            ("iter+verify+rebase", hot_path),
            ("strip (verify)", strip_verify),
            ("strip (no verify)", strip_no_verify),
            ("crop (half)", crop_half),
            ("decode+re-encode", reencode),
            ("split (quarters)", split_quarters),
        ]
        for name, fn in ops:
            cpu = time.process_time()
            sec = timed(fn, args.min_seconds)
            cpu_per_call = sec * (time.process_time() - cpu) / max(1e-9, _last_elapsed[0])
            print(
                f"{codec.name.lower():<7} {name:<20} {len(data) / sec / 1e6:>10.1f}"
                f" {len(batches) / sec:>12.0f} {sec / len(batches) * 1e6:>10.1f}"
                f" {cpu_per_call / (len(data) / 1e9):>9.1f}"
            )
        print()


if __name__ == "__main__":
    main()
