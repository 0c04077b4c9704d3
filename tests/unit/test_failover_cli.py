"""`mm2py offsets` answers bad input with one clear line and exit code 2 (no broker needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mm2py.cli", "offsets", *args], capture_output=True,
                          text=True, timeout=120)


def _config(tmp_path: Path) -> str:
    cfg = tmp_path / "mm2.yaml"
    # nothing listens on port 1 of loopback: connections are refused at once
    cfg.write_text("clusters: {east: '127.0.0.1:1', west: '127.0.0.1:1'}\nflows: {east->west: {}}\n")
    return str(cfg)


def test_unknown_or_malformed_flow(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    out = _run("translate", "-c", cfg, "--flow", "east->south", "--group", "g")
    assert out.returncode == 2 and "no flow east->south" in out.stderr and "Traceback" not in out.stderr
    out = _run("apply", "-c", cfg, "--flow", "east-west", "--group", "g")
    assert out.returncode == 2 and "source->target" in out.stderr


def test_unreachable_target_is_named(tmp_path: Path) -> None:
    out = _run("translate", "-c", _config(tmp_path), "--flow", "east->west", "--group", "g", "--timeout", "2")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "cluster 'west' (127.0.0.1:1)" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_bad_topic_regex_and_missing_group(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    out = _run("translate", "-c", cfg, "--flow", "east->west", "--group", "g", "--topic-regex", "(")
    assert out.returncode == 2 and "invalid --topic-regex" in out.stderr
    out = _run("translate", "-c", cfg, "--flow", "east->west")
    assert out.returncode == 2 and "--group" in out.stderr  # argparse usage error
