"""Offsets kept outside Kafka (no broker): one offset either way, a JSON offsets map, a Spark
Structured Streaming checkpoint rewritten into a new directory, and the checkpoint files' format."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mm2py.config.models import MirrorMakerConfig
from mm2py.engine.offset_syncs import OffsetSyncStore
from mm2py.engine.translation import (
    BeforeSyncsError,
    Direction,
    NotMirroredError,
    PastLogEndError,
    TranslationError,
)
from mm2py.operations.offsets_rewrite import RewriteError, rewrite_json_map, rewrite_spark_checkpoint
from mm2py.operations.translator import FlowTranslator
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.mm2_records import OffsetSync
from mm2py.protocol.spark_offsets import (
    OffsetLogEntry,
    SparkOffsetsError,
    decode_initial_offsets,
    decode_offset_log,
    encode_initial_offsets,
    encode_offset_log,
    kafka_offsets,
)
from mm2py.protocol.types import TopicPartition
from tests.support.hypothesis_examples import examples

FWD, BACK = Direction.FORWARD, Direction.BACK


def _translator() -> FlowTranslator:
    """orders-0: 0-4 plain, 5-9 aborted and its marker, 10-12 committed, 13 its marker, 14-15 plain
    (target 0-9); orders-1: 20 records from source 100, syncs from 105 on (the older ones compacted)."""
    flow = MirrorMakerConfig.from_mapping(
        {"clusters": {"east": "127.0.0.1:1", "west": "127.0.0.1:1"}, "flows": {"east->west": {}}}
    ).flow("east", "west")
    syncs = OffsetSyncStore()
    for partition, u, d in ((0, 0, 0), (0, 10, 5), (0, 14, 8), (1, 105, 5)):
        syncs.add(OffsetSync(TopicPartition("orders", partition), u, d))
    positions = {TopicPartition("orders", 0): Position(16, 10),
                 TopicPartition("orders", 1): Position(120, 20)}
    return FlowTranslator(flow, syncs, positions)


def test_one_offset_either_way() -> None:
    tr = _translator()
    t = tr.translate("orders", 0, 12, FWD)
    assert (t.source_topic, t.target_topic, t.source_offset, t.target_offset) == (
        "orders", "east.orders", 12, 7)
    assert tr.translate("east.orders", 0, 8, BACK).source_offset == 14
    assert tr.translate("orders", 0, 8, BACK).source_offset == 14  # the source's name is accepted too
    assert tr.translate("east.orders", 0, 10, BACK).source_offset == 16  # the end: the next source offset
    with pytest.raises(NotMirroredError, match="east->west has no committed position for orders-7"):
        tr.translate("orders", 7, 0, FWD)
    with pytest.raises(NotMirroredError):
        tr.translate("payments", 0, 0, BACK)
    with pytest.raises(BeforeSyncsError):
        tr.translate("east.orders", 1, 4, BACK)
    with pytest.raises(TranslationError, match="negative"):
        tr.translate("orders", 0, -3, FWD)


def test_a_position_past_the_other_clusters_log_end_is_refused() -> None:
    """No negative lag: the target partition was created again since the flow committed (its end is
    3 now, the committed target offset 10): what would lie past its end is refused, not given."""
    asked: list[tuple[str, TopicPartition]] = []

    def log_end(side: str, tp: TopicPartition) -> int:
        asked.append((side, tp))
        return 3 if side == "target" else 16

    base = _translator()
    tr = FlowTranslator(base.flow, base.syncs, base.positions, log_end)
    assert tr.translate("orders", 0, 2, FWD).target_offset == 2
    assert tr.translate("orders", 0, 3, FWD).target_offset == 3  # at the end: lag 0
    past = r"east\.orders-0 on 'west' ends at 3, before the translated position 5"
    with pytest.raises(PastLogEndError, match=past):
        tr.translate("orders", 0, 10, FWD)
    assert tr.translate("east.orders", 0, 8, BACK).source_offset == 14
    assert asked == [("target", TopicPartition("east.orders", 0)), ("source", TopicPartition("orders", 0))]


def test_json_map_both_ways() -> None:
    tr = _translator()
    forward = rewrite_json_map(tr, {"orders": {"0": 12, "1": 110}}, FWD)
    assert forward == {"east.orders": {"0": 7, "1": 10}}
    assert rewrite_json_map(tr, forward, BACK) == {"orders": {"0": 12, "1": 110}}
    # Spark's latest (-1) and earliest (-2) stay what they are, on the renamed topic
    assert rewrite_json_map(tr, {"orders": {"0": -1, "1": -2}}, FWD) == {"east.orders": {"0": -1, "1": -2}}


def test_json_map_refusals_name_every_offset() -> None:
    tr = _translator()
    with pytest.raises(RewriteError, match=r"2 offsets cannot be translated: .*orders-1.*orders-0"):
        rewrite_json_map(tr, {"orders": {"1": 101, "0": 99}}, FWD)
    for bad in ([1, 2], {"orders": [1]}, {"orders": {"x": 1}}, {"orders": {"0": "5"}},
                {"orders": {"0": 1.5}}):
        with pytest.raises(RewriteError):
            rewrite_json_map(tr, bad, FWD)


META = '{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{"spark.sql.shuffle.partitions":"2"}}'


def _checkpoint(root: Path, batches: dict[int, dict[str, dict[str, int]]], committed: int,
                initial: str = '{"orders":{"0":0,"1":105}}') -> Path:
    """A checkpoint as Spark writes it: metadata, offsets/ and commits/ with Hadoop's .crc files,
    initial offsets, state; a file source beside the Kafka source in every batch."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "sources" / "0").mkdir(parents=True)
    (root / "state" / "0" / "0").mkdir(parents=True)
    (root / "metadata").write_text('{"id":"5a0e0f4e-2d1c-4c9a-9b0e-000000000001"}')
    (root / "state" / "0" / "0" / "1.delta").write_bytes(b"\x00\x01state")
    for n, offsets in batches.items():
        kafka = json.dumps(offsets, separators=(",", ":"))
        (root / "offsets" / str(n)).write_text("\n".join(["v1", META, kafka, f'{{"logOffset":{n}}}']))
        (root / "offsets" / f".{n}.crc").write_bytes(b"crc\x00stale")
        if n <= committed:
            (root / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (root / "sources" / "0" / "0").write_bytes(encode_initial_offsets(initial))
    return root


def _kafka_lines(root: Path, batch: int) -> list[dict[str, dict[int, int]] | None]:
    entry = decode_offset_log((root / "offsets" / str(batch)).read_bytes())
    return [None if text is None else kafka_offsets(text) for _, text in entry.sources]


def test_spark_checkpoint_forward_into_a_new_directory(tmp_path: Path) -> None:
    src = _checkpoint(tmp_path / "cp", {0: {"orders": {"0": 0, "1": 105}}, 1: {"orders": {"0": 4, "1": 106}},
                                        2: {"orders": {"0": 12, "1": 110}}}, committed=2)
    before = {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}
    done = rewrite_spark_checkpoint(_translator(), src, tmp_path / "west-cp", FWD)
    dst = tmp_path / "west-cp"
    assert sorted(done.batches) == [0, 1, 2] and done.initial == ["sources/0/0"] and not done.notes
    assert _kafka_lines(dst, 2) == [{"east.orders": {0: 7, 1: 10}}, None]  # the file source: not Kafka's
    assert _kafka_lines(dst, 1) == [{"east.orders": {0: 4, 1: 6}}, None]
    entry = decode_offset_log((dst / "offsets" / "2").read_bytes())
    assert entry.metadata == META and entry.sources[1][1] == '{"logOffset":2}'
    assert not (dst / "offsets" / ".2.crc").exists()  # a stale checksum would fail Spark's read
    initial = decode_initial_offsets((dst / "sources" / "0" / "0").read_bytes())
    assert initial == '{"east.orders":{"0":0,"1":5}}'
    for same in ("metadata", "commits/2", "state/0/0/1.delta"):
        assert (dst / same).read_bytes() == (src / same).read_bytes()
    assert {p: p.read_bytes() for p in src.rglob("*") if p.is_file()} == before  # the original untouched
    # and back again: the original offsets (each holds a record, or is the end)
    back = rewrite_spark_checkpoint(_translator(), dst, tmp_path / "east-again", BACK)
    assert sorted(back.batches) == [0, 1, 2]
    for n in (0, 1, 2):
        assert _kafka_lines(tmp_path / "east-again", n) == _kafka_lines(src, n)


def test_spark_checkpoint_older_batches_that_do_not_translate_are_removed(tmp_path: Path) -> None:
    src = _checkpoint(tmp_path / "cp", {3: {"orders": {"1": 101}}, 4: {"orders": {"1": 104}},
                                        5: {"orders": {"1": 107}}, 6: {"orders": {"1": 111}}}, committed=5,
                      initial='{"orders":{"1":100}}')
    done = rewrite_spark_checkpoint(_translator(), src, tmp_path / "out", FWD)
    assert done.batches == [6, 5] and done.removed == [4, 3]
    assert "offsets/4 and older (2 batches) removed" in done.notes[0]
    out = tmp_path / "out" / "offsets"
    assert not (out / "4").exists() and not (out / ".4.crc").exists()
    assert any("sources/0/0 removed" in n for n in done.notes)  # orders-1 at 100: before the syncs
    assert not (tmp_path / "out" / "sources" / "0" / "0").exists()


def test_spark_checkpoint_refusals(tmp_path: Path) -> None:
    tr = _translator()
    src = _checkpoint(tmp_path / "cp", {7: {"orders": {"1": 104}}, 8: {"orders": {"1": 111}}}, committed=7)
    with pytest.raises(RewriteError, match=r"offsets/7: .*orders-1"):  # batch 8 runs again from batch 7's
        rewrite_spark_checkpoint(tr, src, tmp_path / "out", FWD)
    assert not (tmp_path / "out").exists()  # nothing half-written is left
    (tmp_path / "exists").mkdir()
    with pytest.raises(RewriteError, match="exists"):
        rewrite_spark_checkpoint(tr, src, tmp_path / "exists", FWD)
    with pytest.raises(RewriteError, match="inside the checkpoint"):
        rewrite_spark_checkpoint(tr, src, src / "copy", FWD)
    with pytest.raises(RewriteError, match="not a Structured Streaming checkpoint"):
        rewrite_spark_checkpoint(tr, tmp_path / "exists", tmp_path / "out", FWD)


def test_offset_log_format() -> None:
    v1 = b'v1\n{"batchWatermarkMs":0}\n{"t":{"0":1}}\n-'
    entry = decode_offset_log(v1)
    assert entry == OffsetLogEntry(1, '{"batchWatermarkMs":0}', ((None, '{"t":{"0":1}}'), (None, None)))
    assert encode_offset_log(entry) == v1
    v2 = b'v2\n{}\n0:{"t":{"0":1}}\nfile:-'
    assert encode_offset_log(decode_offset_log(v2)) == v2
    assert decode_offset_log(v1 + b"\n") == entry  # a trailing newline is read too
    assert kafka_offsets('{"logOffset":3}') is None and kafka_offsets('{"t":{"0":1.5}}') is None
    assert decode_initial_offsets(b'{"t":{"0":4}}') == '{"t":{"0":4}}'  # Spark 2.1.0 wrote no version
    for bad in (b"v9\n{}", b"v1", b"\xff\xfe", b'v2\n{}\nno-colon'):
        with pytest.raises(SparkOffsetsError):
            decode_offset_log(bad)


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=200))
def test_decoders_raise_only_their_error(data: bytes) -> None:
    for decode in (decode_offset_log, decode_initial_offsets):
        try:
            text = decode(data)
        except SparkOffsetsError:
            continue
        for line in [text] if isinstance(text, str) else [t for _, t in text.sources if t is not None]:
            with contextlib.suppress(SparkOffsetsError):
                kafka_offsets(line)
