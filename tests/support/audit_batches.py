"""Source batches and the target batches a mirror makes of them, for the audit's unit tests: the
target side goes through mm2py's own pure produce path (``prepare``: coalescing, rebuilds; then
``for_produce``: the producer's fields and a fresh CRC; then the offsets the target broker gives)."""

from __future__ import annotations

from collections.abc import Sequence

from mm2py.connectors.outgoing import CoalesceSettings, prepare
from mm2py.engine.audit import PartitionWalk
from mm2py.protocol.batch_edit import for_produce
from mm2py.protocol.compression import Codec
from mm2py.protocol.record_codec import Record, build_batch
from mm2py.protocol.records import RecordBatch

BASE_TS = 1_700_000_000_000


def record(n: int, delta: int = 0, ts_delta: int = 0) -> Record:
    """Record number ``n`` of the tests (a key, a value, headers on some) at ``delta``."""
    return Record(delta, ts_delta, f"k{n}".encode() if n % 4 else None,
                  f"value-{n}-".encode() + bytes(n % 30),
                  (("h", str(n).encode()), ("n", None)) if n % 3 == 1 else ())


def batches(count: int, per_batch: int, *, codec: Codec = Codec.LZ4, start: int = 0, first_value: int = 0,
            gaps: Sequence[int] = (), producer_id: int = 7) -> list[RecordBatch]:
    """``count`` batches of ``per_batch`` records from offset ``start``; the batch index ``i`` in
    ``gaps`` starts 3 offsets after the previous one ends (an aborted transaction left out)."""
    out = []
    offset, n = start, first_value
    for i in range(count):
        if i in gaps:
            offset += 3
        recs = [record(n + j, j, j * 3) for j in range(per_batch)]
        out.append(RecordBatch(build_batch(recs, codec=codec, base_offset=offset,
                                           base_timestamp=BASE_TS + n, producer_id=producer_id,
                                           producer_epoch=0, base_sequence=n)))
        offset += per_batch
        n += per_batch
    return out


def mirrored(source: Sequence[RecordBatch], *, target_start: int = 0,
             coalesce: CoalesceSettings | None = None) -> list[RecordBatch]:
    """The target batches mm2py writes for ``source`` (coalescing off unless given)."""
    out = []
    offset, seq = target_start, 0
    for o in prepare(list(source), coalesce or CoalesceSettings(enabled=False)):
        produced = RecordBatch(for_produce(o.batch, 4242, 3, seq))
        out.append(RecordBatch(produced.rebased(offset, 12)))
        offset += produced.last_offset_delta + 1
        seq += produced.records_count
    return out


def rebatched(source: Sequence[RecordBatch], *, size: int, codec: Codec,
              target_start: int = 0) -> list[RecordBatch]:
    """The source's records in batches of ``size`` records, ``codec``: as a record-level mirror
    (Apache MirrorMaker 2) writes them."""
    from mm2py.protocol.record_codec import decode_records

    flat = [(b.base_timestamp + r.timestamp_delta, r) for b in source for r in decode_records(b)]
    out = []
    for i in range(0, len(flat), size):
        chunk = flat[i:i + size]
        base_ts = chunk[0][0]
        recs = [Record(j, ts - base_ts, r.key, r.value, r.headers) for j, (ts, r) in enumerate(chunk)]
        out.append(RecordBatch(build_batch(recs, codec=codec, base_offset=target_start + i,
                                           base_timestamp=base_ts)))
    return out


def end_of(batches: Sequence[RecordBatch], default: int = 0) -> int:
    return batches[-1].next_offset if batches else default


def walk(source: Sequence[RecordBatch], target: Sequence[RecordBatch], *, source_start: int | None = None,
         target_start: int | None = None, source_end: int | None = None, target_end: int | None = None,
         chunk: int = 0) -> PartitionWalk:
    """A walk over both sides, fed everything at once (``chunk`` 0) or ``chunk`` batches a side
    at a time, as the walk asks for them; stepped until it stops."""
    s0 = source[0].base_offset if source_start is None else source_start
    t0 = target[0].base_offset if target_start is None and target else (target_start or 0)
    w = PartitionWalk(s0, end_of(source, s0) if source_end is None else source_end,
                      t0, end_of(target, t0) if target_end is None else target_end)
    sides = [(list(source), w.wants_source, w.add_source, w.source),
             (list(target), w.wants_target, w.add_target, w.target)]
    for _ in range(100_000):
        w.step()
        if w.done:
            return w
        fed = False
        for left, wants, add, side in sides:
            if wants():
                take = [b for b in left if b.next_offset > side.fetch_next]
                take = take[:chunk] if chunk else take
                add(take, take[-1].next_offset if take else side.end)
                fed = True
        assert fed, "the walk stands still: it wants nothing and is not done"
    raise AssertionError("the walk does not end")
