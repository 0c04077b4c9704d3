"""The CLI's answers to bad input: clear one-line errors, exit code 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _run(*args: str, env: dict[str, str] | None = None,
         module: str = "mm2py.cli") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.cli_process
def test_unknown_key_is_named(tmp_path: Path) -> None:
    cfg = tmp_path / "mm2.properties"
    cfg.write_text("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:2\n"
                   "a->b.enabled = true\na->b.topcs = orders\n")
    out = _run("run", "-c", str(cfg))
    assert out.returncode == 2
    assert "unknown key 'a->b.topcs'" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.cli_process
def test_missing_file_and_no_enabled_flow(tmp_path: Path) -> None:
    out = _run("run", "-c", str(tmp_path / "nope.yaml"))
    assert out.returncode == 2 and "nope.yaml" in out.stderr and "Traceback" not in out.stderr
    cfg = tmp_path / "idle.yaml"
    cfg.write_text("clusters: {a: 'x:1', b: 'y:2'}\n")
    out = _run("run", "-c", str(cfg))
    assert out.returncode == 2 and "enables no flow" in out.stderr


@pytest.mark.cli_process
def test_python_dash_m_mm2py_is_the_same_command(tmp_path: Path) -> None:
    """``python -m mm2py`` (``mm2py.__main__``) runs the ``mm2py`` command: its subcommands and its
    one-line errors."""
    out = _run("run", "-c", str(tmp_path / "nope.yaml"), module="mm2py")
    assert out.returncode == 2 and "nope.yaml" in out.stderr and "Traceback" not in out.stderr, out.stderr
    helped = _run("--help", module="mm2py")
    assert helped.returncode == 0 and "offsets" in helped.stdout and "run" in helped.stdout, helped.stdout


@pytest.mark.cli_process
def test_the_pure_python_path_is_announced_once_at_start_up(tmp_path: Path) -> None:
    """Without the compiled path (turned off here as a missing extension turns it off) ``run``
    says so once, with how to get it; with it, nothing is said."""
    import os

    cfg = tmp_path / "idle.yaml"
    cfg.write_text("clusters: {a: 'x:1', b: 'y:2'}\n")
    env = {k: v for k, v in os.environ.items() if k != "MM2PY_NATIVE"}
    off = _run("run", "-c", str(cfg), env={**env, "MM2PY_NATIVE": "0"})
    assert off.returncode == 2
    lines = [line for line in off.stderr.splitlines() if "compiled hot path is off" in line]
    assert len(lines) == 1 and "WARNING" in lines[0], off.stderr
    assert "MM2PY_NATIVE=0" in lines[0] and "pure-Python path" in lines[0] and "liblz4-dev" in lines[0]
    on = _run("run", "-c", str(cfg), env=env)
    assert on.returncode == 2 and "compiled hot path" not in on.stderr, on.stderr


#: runs ``mm2py`` as a Python without pyspark would (``pip install mm2py`` without the spark extra)
WITHOUT_PYSPARK = ("import sys; sys.modules['pyspark'] = None\n"
                   "from mm2py.cli import main\n"
                   "sys.exit(main(sys.argv[1:]))\n")


@pytest.mark.cli_process
def test_without_pyspark_the_spark_runtime_is_a_one_line_error_and_in_process_runs(tmp_path: Path) -> None:
    cfg = tmp_path / "mm2.yaml"
    cfg.write_text("clusters: {east: '127.0.0.1:1', west: '127.0.0.1:1'}\nflows: {east->west: {}}\n")
    out = subprocess.run([sys.executable, "-c", WITHOUT_PYSPARK, "run", "-c", str(cfg), "--runtime", "spark"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "--runtime spark needs pyspark" in out.stderr and "pip install 'mm2py[spark]'" in out.stderr
    # the in-process worker, its REST API and metrics load without pyspark
    probe = ("import sys; sys.modules['pyspark'] = None\n"
             "import mm2py.cli, mm2py.runtime.inprocess, mm2py.runtime.metrics, mm2py.rest_api.app\n"
             "print(sorted(m for m in sys.modules if m.startswith('mm2py.runtime.spark.driver.worker')))\n")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[]", loaded.stderr


@pytest.mark.cli_process
def test_bad_client_override_is_a_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "mm2.properties"
    cfg.write_text("clusters = a, b\na.bootstrap.servers = 127.0.0.1:1\nb.bootstrap.servers = 127.0.0.1:1\n"
                   "a->b.enabled = true\na.consumer.isolation.level = sometimes\n")
    out = _run("run", "-c", str(cfg))
    assert out.returncode == 2
    assert "isolation.level" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.cli_process
def test_bad_spark_settings_are_refused_before_anything_starts(tmp_path: Path) -> None:
    cfg = tmp_path / "mm2.yaml"
    cfg.write_text("clusters: {east: '127.0.0.1:1', west: '127.0.0.1:1'}\nflows: {east->west: {}}\n")
    out = _run("run", "-c", str(cfg), "--runtime", "spark", "--spark-conf", "spark.ui.enabled")
    assert out.returncode == 2
    assert "--spark-conf expects KEY=VALUE, got 'spark.ui.enabled'" in out.stderr
    out = _run("run", "-c", str(cfg), "--runtime", "flink")
    assert out.returncode == 2 and "invalid choice: 'flink'" in out.stderr


@pytest.mark.cli_process
def test_commands_import_kio_without_its_hypothesis_strategies() -> None:
    """hypothesis is installed here (a test dependency): the CLI imports kio with it hidden, so kio
    registers no strategies (start-up time), and hypothesis can still be imported afterwards."""
    probe = (
        "import sys\n"
        "from mm2py.cli import _import_kio_without_test_strategies as hide\n"
        "hide()\n"
        "import kio.static._phantom as phantom\n"
        "print(phantom.hypothesis is None, 'hypothesis' in sys.modules)\n"
        "import hypothesis.strategies\n"
        "print('importable')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "importable"]
    # a process that already imported hypothesis (a test calling main()) is left as it is
    already = "import hypothesis\n" + probe
    out = subprocess.run([sys.executable, "-c", already], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "importable"]
