"""mm2py's Spark Python daemon (runtime/spark/daemon.py) imports pyspark and py4j from the
installation instead of the zips Spark puts on the executors' PYTHONPATH, only when the versions
are the same."""

from __future__ import annotations

import importlib.metadata
import sys
import zipfile
from pathlib import Path

import pytest

from mm2py.runtime.spark.daemon import _prefer_installed_pyspark

PYSPARK = importlib.metadata.version("pyspark")
PY4J = importlib.metadata.version("py4j")


def _zips(tmp_path: Path, pyspark: str, py4j: str) -> tuple[str, str]:
    zipped = tmp_path / "pyspark.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("pyspark/version.py", f"__version__: str = '{pyspark}'\n")
    other = tmp_path / f"py4j-{py4j}-src.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("py4j/__init__.py", "")
    return str(zipped), str(other)


def test_the_zips_of_the_installed_versions_leave_the_path(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    zipped, py4j = _zips(tmp_path, PYSPARK, PY4J)
    monkeypatch.setattr(sys, "path", [zipped, py4j, "/app", *sys.path])
    _prefer_installed_pyspark()
    assert zipped not in sys.path and py4j not in sys.path and "/app" in sys.path


@pytest.mark.parametrize("pyspark, py4j", [("3.5.1", PY4J), (PYSPARK, "0.10.9.7")])
def test_zips_of_other_versions_stay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     pyspark: str, py4j: str) -> None:
    zipped, other = _zips(tmp_path, pyspark, py4j)
    path = [zipped, other, "/app"]
    monkeypatch.setattr(sys, "path", list(path))
    _prefer_installed_pyspark()
    assert sys.path == path


def test_a_broken_zip_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    zipped, py4j = _zips(tmp_path, PYSPARK, PY4J)
    Path(zipped).write_bytes(b"not a zip")
    monkeypatch.setattr(sys, "path", [zipped, py4j])
    _prefer_installed_pyspark()
    assert sys.path == [zipped, py4j]
