"""`mm2py audit`: exit status 2 with one clear line when it cannot run (no broker needed), and its
report: the verdict and exit status from the partitions' statuses, the JSON shape, the table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mm2py.engine.audit import (
    CompareMode,
    Mismatch,
    MismatchKind,
    OffsetRange,
    PartitionOutcome,
    PartitionStatus,
)
from mm2py.operations.audit.report import AnchorsRead, AuditReport, Verdict, partition_report, table
from mm2py.operations.audit.scope import Pair, mirrored_topics
from mm2py.protocol.types import TopicPartition


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mm2py.cli", "audit", *args], capture_output=True, text=True,
                          timeout=120)


def _config(tmp_path: Path, flows: str = "flows: {east->west: {}}") -> str:
    cfg = tmp_path / "mm2.yaml"
    # nothing listens on port 1 of loopback: connections are refused at once
    cfg.write_text("clusters: {east: '127.0.0.1:1', west: '127.0.0.1:1'}\n" + flows
                   + "\nmm2py.unreachable.timeout.ms: 1000\n")
    return str(cfg)


@pytest.mark.cli_process
def test_an_unreachable_cluster_is_named_in_one_line(tmp_path: Path) -> None:
    out = _run("-c", _config(tmp_path), "--flow", "east->west")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "cluster 'east' (127.0.0.1:1) is unreachable" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and out.stdout == ""


@pytest.mark.cli_process
def test_bad_flow_topics_and_configuration_are_refused(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    out = _run("-c", cfg, "--flow", "east->south")
    assert out.returncode == 2 and "no flow east->south" in out.stderr
    out = _run("-c", cfg, "--flow", "east-west")
    assert out.returncode == 2 and "source->target" in out.stderr
    out = _run("-c", cfg, "--topics", "(")
    assert out.returncode == 2 and "--topics is no regular expression" in out.stderr
    out = _run("-c", _config(tmp_path, "flows: {}"))
    assert out.returncode == 2 and "name the flow to audit with --flow" in out.stderr
    out = _run("-c", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_the_flow_s_topics_are_mm2_s() -> None:
    from mm2py.config.models import MirrorMakerConfig

    config = MirrorMakerConfig.from_mapping({
        "clusters": {"east": "127.0.0.1:1", "west": "127.0.0.1:2"},
        "flows": {"east->west": {"topics": "orders.*, heartbeats"}}})
    flow = config.flow("east", "west")
    names = ["orders", "orders.eu", "payments", "west.orders", "mm2-offset-syncs.west.internal", "heartbeats"]
    assert mirrored_topics(flow, names, None) == {
        "heartbeats": "east.heartbeats", "orders": "east.orders", "orders.eu": "east.orders.eu"}
    import re

    assert mirrored_topics(flow, names, re.compile("orders")) == {"orders": "east.orders"}


def _pair(p: int) -> Pair:
    return Pair(TopicPartition("orders", p), TopicPartition("east.orders", p))


def _report(*outcomes: PartitionOutcome) -> AuditReport:
    parts = [partition_report(_pair(i), o) for i, o in enumerate(outcomes)]
    return AuditReport(flow="east->west", source="east", target="west",
                       verdict=AuditReport.verdict_of([p.status for p in parts]),
                       started_at="2026-01-01T00:00:00+00:00", seconds=2.5, compare_seconds=2.0,
                       source_bytes=400_000_000,
                       target_bytes=400_000_000, source_mb_per_s=200.0,
                       anchors=AnchorsRead(offset_syncs=3, stored_positions=1, malformed_records=0),
                       notes=[], partitions=parts)


AGREE = PartitionOutcome(PartitionStatus.AGREE, OffsetRange(0, 100), OffsetRange(7, 107),
                         CompareMode.BATCHES, 3, anchor=(0, 7, "stored position"))
EXTRA = PartitionOutcome(PartitionStatus.MISMATCH, OffsetRange(0, 40), OffsetRange(0, 40),
                         CompareMode.RECORDS, mismatch=Mismatch(
                             MismatchKind.EXTRA, OffsetRange(40, 41), OffsetRange(40, 41),
                             "target records the source does not hold"))


@pytest.mark.parametrize(("statuses", "verdict", "code"), [
    ([PartitionStatus.AGREE, PartitionStatus.AGREE], Verdict.AGREE, 0),
    ([PartitionStatus.AGREE, PartitionStatus.MISMATCH, PartitionStatus.ERROR], Verdict.DISAGREE, 1),
    ([PartitionStatus.UNALIGNED], Verdict.DISAGREE, 1),
    ([PartitionStatus.AGREE, PartitionStatus.ERROR], Verdict.INCOMPLETE, 2),
])
def test_the_verdict_and_exit_status(statuses: list[PartitionStatus], verdict: Verdict, code: int) -> None:
    assert AuditReport.verdict_of(statuses) is verdict and verdict.exit_code == code


def test_the_report_names_the_first_mismatch_in_json_and_in_the_table() -> None:
    report = _report(AGREE, EXTRA)
    doc = json.loads(report.model_dump_json())
    assert doc["verdict"] == "disagree"
    first, second = doc["partitions"]
    assert first["status"] == "agree" and first["compared"] == "batches" and first["first_mismatch"] is None
    assert first["source_verified"] == {"first": 0, "last": 99}
    assert first["target_verified"] == {"first": 7, "last": 106}
    assert first["anchor"] == {"source": 0, "target": 7, "kind": "stored position"}
    assert second["anchor"] is None
    assert second["first_mismatch"] == {"kind": "extra", "source": {"first": 40, "last": 40},
                                        "target": {"first": 40, "last": 40},
                                        "detail": "target records the source does not hold"}
    lines = table(report).splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "STATUS", "SOURCE", "VERIFIED", "TARGET", "VERIFIED",
                                "COMPARED", "FIRST", "MISMATCH"]
    assert lines[1].split() == ["orders", "0", "agree", "0..99", "7..106", "batches", "-"]
    assert lines[2].split()[:6] == ["orders", "1", "mismatch", "0..39", "0..39", "records"]
    assert "extra: source 40, target 40" in lines[2]
    assert lines[3] == ("east->west: DISAGREE: 2 partitions (1 agree, 1 mismatch); 400.0 MB of source "
                        "batches compared in 2.0 s (200 MB/s), 2.5 s in all")
    assert lines[4] == "  orders-1: target records the source does not hold"


def test_progress_lines_on_stderr() -> None:
    import io

    from mm2py.cli.audit import ProgressLine
    from mm2py.operations.audit import Progress

    out = io.StringIO()
    line = ProgressLine(out, "east->west")
    line(Progress(4, 1, 50_000_000, 49_000_000, started=0.0))
    line(Progress(4, 2, 60_000_000, 59_000_000, started=0.0))  # within 5 s of the last: not shown
    line(Progress(4, 4, 80_000_000, 79_000_000, started=0.0, ended=1.0))  # the last one always is
    lines = out.getvalue().splitlines()
    assert lines == ["audit east->west: 1/4 partitions done, 50.0 MB source / 49.0 MB target read, "
                     + lines[0].rsplit(", ", 1)[1],
                     "audit east->west: 4/4 partitions done, 80.0 MB source / 79.0 MB target read, 80 MB/s"]


def test_the_flow_to_audit() -> None:
    from mm2py.cli.audit import pick_flow
    from mm2py.config.errors import ConfigError
    from mm2py.config.models import MirrorMakerConfig

    config = MirrorMakerConfig.from_mapping({"clusters": {"east": "h:1", "west": "h:2", "south": "h:3"},
                                             "flows": {"east->west": {}}})
    assert pick_flow(config, None, None).name == "east->west"
    assert pick_flow(config, "west -> south", None).name == "west->south"  # not enabled: audited all the same
    named = pick_flow(config, "east->west", "fast-lane")
    assert named.name == "fast-lane" and named.connector_name == "fast-lane"
    two = MirrorMakerConfig.from_mapping({"clusters": {"east": "h:1", "west": "h:2"},
                                          "flows": {"east->west": {}, "west->east": {}}})
    with pytest.raises(ConfigError, match="enabled flows: east->west, west->east"):
        pick_flow(two, None, None)
