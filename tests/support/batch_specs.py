"""Batches of every kind a fetch can bring, as hypothesis strategies and builders (shared by the
coalescing tests and the compiled-path tests)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from mm2py.protocol.coalesce import DEFAULT_TARGET, DEFAULT_THRESHOLD
from mm2py.protocol.compression import Codec
from mm2py.protocol.record_codec import Record, build_batch
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition

TP = TopicPartition("small", 0)
BASE_TS = 1_700_000_000_000
KINDS = ("plain", "plain", "plain", "plain", "plain", "control", "txn", "logappend", "compacted")


@dataclass(frozen=True)
class Spec:
    gap: int  # source offsets skipped before this batch
    kind: str
    codec: Codec
    values: tuple[int, ...]  # value size of each record
    ts: int  # base timestamp offset from BASE_TS
    producer: int  # source producer id (-1: none)


spec_st = st.builds(
    Spec,
    gap=st.sampled_from([0, 0, 0, 0, 1, 3]),
    kind=st.sampled_from(KINDS),
    codec=st.sampled_from([Codec.LZ4, Codec.LZ4, Codec.LZ4, *Codec]),
    values=st.lists(st.integers(0, 900), min_size=1, max_size=12).map(tuple),
    ts=st.integers(-5_000, 5_000),
    producer=st.sampled_from([-1, 7, 8]),
)
#: mostly small plain batches, so that runs form often
small_spec_st = st.builds(
    Spec,
    gap=st.sampled_from([0, 0, 0, 0, 0, 0, 0, 2]),
    kind=st.sampled_from(("plain",) * 12 + KINDS),
    codec=st.sampled_from([Codec.LZ4] * 8 + [Codec.NONE, Codec.ZSTD]),
    values=st.lists(st.integers(0, 200), min_size=1, max_size=5).map(tuple),
    ts=st.integers(-5_000, 5_000),
    producer=st.sampled_from([-1, 7, 8]),
)
sizes_st = st.tuples(st.sampled_from([512, 2048, DEFAULT_THRESHOLD]),
                     st.sampled_from([1024, 6000, DEFAULT_TARGET]))


def _records(spec: Spec, n: int) -> list[Record]:
    deltas = [2 * i for i in range(len(spec.values))] if spec.kind == "compacted" else range(n)
    return [
        Record(
            offset_delta=d,
            timestamp_delta=(d * 37) % 500 - 100,
            key=None if d % 5 == 4 else f"k{d}-{spec.ts}".encode(),
            value=bytes((d + j) % 251 for j in range(size)),
            headers=(("h", f"{d}".encode()), ("n", None)) if d % 3 == 1 else (),
        )
        for d, size in zip(deltas, spec.values, strict=True)
    ]


def build(specs: list[Spec]) -> list[RecordBatch]:
    """One partition's fetched batches for ``specs``, at increasing offsets."""
    out: list[RecordBatch] = []
    offset = 0
    for spec in specs:
        offset += spec.gap
        n = len(spec.values)
        recs = _records(spec, n)
        kw: dict[str, object] = {}
        if spec.kind == "control":
            recs = [Record(0, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", ())]
            kw = {"control": True, "transactional": True}
        elif spec.kind == "txn":
            kw = {"transactional": True}
        elif spec.kind == "logappend":
            kw = {"timestamp_type": 1, "max_timestamp": BASE_TS + 10_000}
        pid = spec.producer if spec.kind not in ("control", "txn") else 9
        data = build_batch(recs, codec=spec.codec, base_offset=offset, base_timestamp=BASE_TS + spec.ts,
                           producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                           base_sequence=offset if pid >= 0 else -1, **kw)  # type: ignore[arg-type]
        batch = RecordBatch(data)
        out.append(batch)
        offset = batch.next_offset
    return out

