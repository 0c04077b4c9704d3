"""`mm2py offsets` answers bad input with one clear line and exit code 2, and chooses, per partition,
between a group's checkpoint and its newer commit translated directly (no broker needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mm2py.operations.failover import Row, group_rows
from mm2py.protocol.mm2_records import Checkpoint
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import GroupOffset


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mm2py.cli", "offsets", *args], capture_output=True,
                          text=True, timeout=120)


def _config(tmp_path: Path) -> str:
    cfg = tmp_path / "mm2.yaml"
    # nothing listens on port 1 of loopback: connections are refused at once
    cfg.write_text("clusters: {east: '127.0.0.1:1', west: '127.0.0.1:1'}\nflows: {east->west: {}}\n")
    return str(cfg)


@pytest.mark.cli_process
def test_unknown_or_malformed_flow(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    out = _run("translate", "-c", cfg, "--flow", "east->south", "--group", "g")
    assert out.returncode == 2 and "no flow east->south" in out.stderr and "Traceback" not in out.stderr
    out = _run("apply", "-c", cfg, "--flow", "east-west", "--group", "g")
    assert out.returncode == 2 and "source->target" in out.stderr


@pytest.mark.cli_process
def test_unreachable_target_is_named(tmp_path: Path) -> None:
    out = _run("translate", "-c", _config(tmp_path), "--flow", "east->west", "--group", "g", "--timeout", "2")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "cluster 'west' (127.0.0.1:1)" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.cli_process
def test_bad_topic_regex_and_missing_group(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    out = _run("translate", "-c", cfg, "--flow", "east->west", "--group", "g", "--topic-regex", "(")
    assert out.returncode == 2 and "invalid --topic-regex" in out.stderr
    out = _run("translate", "-c", cfg, "--flow", "east->west")
    assert out.returncode == 2 and "--group" in out.stderr  # argparse usage error


def test_a_commit_newer_than_its_checkpoint_is_translated_instead() -> None:
    """A checkpoint made before the group committed again would make it re-read what it read since
    (one made before a reset back would make it skip): the current commit, translated, wins; the
    checkpoint stays where the commit cannot be translated, with a note; a checkpoint for the
    current commit, or with the source unknown, is used as it is."""
    def t(p: int) -> TopicPartition:
        return TopicPartition("east.orders", p)

    checkpoints = {t(p): Checkpoint("g", t(p), 100, 90, "") for p in range(4)}
    committed = {TopicPartition("orders", p): GroupOffset(o, "")
                 for p, o in ((0, 100), (1, 150), (2, 160), (3, 40))}
    asked: list[dict[TopicPartition, GroupOffset]] = []

    def directly(offsets: dict[TopicPartition, GroupOffset]) -> list[Row]:
        asked.append(offsets)  # partition 2's commit is past what was mirrored: not translated
        return [Row("g", tp.topic, tp.partition, o.offset, f"east.{tp.topic}", o.offset - 10, "offset-syncs")
                for tp, o in offsets.items() if tp.partition != 2]

    notes: list[str] = []
    rows = group_rows("g", checkpoints, committed, directly, source_topic=lambda n: n.removeprefix("east."),
                      rename=lambda n: f"east.{n}", wanted=lambda n: True, notes=notes)
    got = sorted((r.partition, r.source_offset, r.target_offset, r.via) for r in rows)
    assert got == [(0, 100, 90, "checkpoint"), (1, 150, 140, "offset-syncs"), (2, 100, 90, "checkpoint"),
                   (3, 40, 30, "offset-syncs")]
    assert asked == [{TopicPartition("orders", p): committed[TopicPartition("orders", p)] for p in (1, 2, 3)}]
    assert len(notes) == 3 and "committed 160 since, which cannot be translated yet" in notes[1]
    # the source unreachable: the checkpoints as they are, nothing asked
    assert len(group_rows("g", checkpoints, {}, directly, source_topic=lambda n: n.removeprefix("east."),
                          rename=lambda n: f"east.{n}", wanted=lambda n: True, notes=[])) == 4
    assert len(asked) == 1


def test_a_rows_direction_is_the_translation_direction_whatever_it_was_given_as() -> None:
    """Issue 48: ``Row.direction`` was a ``str`` beside :class:`Direction`; a failback row read
    back from JSON ("back") and one built with the enum are the same row, and commit to the source."""
    from mm2py.engine.translation import Direction

    built = Row("g", "orders", 1, 7, "east.orders", 9, "offset-syncs", "", Direction.BACK)
    read = Row("g", "orders", 1, 7, "east.orders", 9, "offset-syncs", "", "back")  # type: ignore[arg-type]
    assert read == built and read.direction is Direction.BACK
    assert read.back and read.destination() == (TopicPartition("orders", 1), 7)
    forward = Row("g", "orders", 1, 7, "east.orders", 9, "offset-syncs")
    assert forward.direction is Direction.FORWARD
    assert forward.destination() == (TopicPartition("east.orders", 1), 9)
    with pytest.raises(ValueError):
        Row("g", "orders", 1, 7, "east.orders", 9, "offset-syncs", "", "sideways")  # type: ignore[arg-type]
