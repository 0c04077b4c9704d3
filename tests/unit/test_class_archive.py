"""Class-data sharing for the harness's JVMs: one JVM of a role records, later ones map; a candidate
is used only once whole, and never for another role, JDK or jar set (files stand in for archives:
a whole one starts with the magic the JVM writes last)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mm2py.kafka_local.class_archive import ARCHIVE_MAGIC, STALE_SECONDS, class_archive_args

JAVA = sys.executable  # only its path and stat enter the archive's name


@pytest.fixture
def jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MM2PY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MM2PY_CLASS_ARCHIVE", raising=False)
    d = tmp_path / "jars"
    d.mkdir()
    (d / "a.jar").write_bytes(b"a")
    (d / "b.jar").write_bytes(b"bb")
    return d


def _option(args: list[str], name: str) -> Path:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"-XX:{name}=")]
    return Path(value)


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_one_jvm_records_and_the_next_start_after_its_exit_maps_the_archive(jars: Path) -> None:
    candidate = _option(class_archive_args("broker", jars, java=JAVA), "ArchiveClassesAtExit")
    assert class_archive_args("broker", jars, java=JAVA) == []  # the first one is still running
    candidate.write_bytes(b"\0" * 64)  # regions written, header not yet: the JVM is mid-exit
    assert class_archive_args("broker", jars, java=JAVA) == []
    candidate.write_bytes(ARCHIVE_MAGIC + b"\0" * 60)  # header written last: whole
    mapped = class_archive_args("broker", jars, java=JAVA)
    archive = _option(mapped, "SharedArchiveFile")
    assert "-Xshare:auto" in mapped and archive.read_bytes().startswith(ARCHIVE_MAGIC)
    assert not candidate.exists() and not list(archive.parent.glob("*.recording"))
    assert class_archive_args("broker", jars, java=JAVA) == mapped


def test_roles_jar_sets_and_jdks_get_archives_of_their_own(jars: Path, tmp_path: Path) -> None:
    first = _option(class_archive_args("broker", jars, java=JAVA), "ArchiveClassesAtExit")
    first.write_bytes(ARCHIVE_MAGIC)
    assert _option(class_archive_args("broker", jars, java=JAVA), "SharedArchiveFile")
    # Kafka's storage tool runs on the same jars but loads other classes: it records its own
    assert _option(class_archive_args("tool", jars, java=JAVA), "ArchiveClassesAtExit")
    (jars / "b.jar").write_bytes(b"a different jar")
    assert _option(class_archive_args("broker", jars, java=JAVA), "ArchiveClassesAtExit")
    other_java = tmp_path / "java"
    other_java.write_text("another JDK")
    (jars / "b.jar").write_bytes(b"bb")
    os.utime(jars / "b.jar", None)
    assert _option(class_archive_args("tool", jars, java=str(other_java)), "ArchiveClassesAtExit")


def test_a_recorder_killed_before_its_exit_is_replaced_after_a_while(jars: Path) -> None:
    killed = _option(class_archive_args("driver", jars, java=JAVA), "ArchiveClassesAtExit")
    assert class_archive_args("driver", jars, java=JAVA) == []
    (marker,) = killed.parent.glob("*.recording")
    _age(marker, STALE_SECONDS + 1)
    again = _option(class_archive_args("driver", jars, java=JAVA), "ArchiveClassesAtExit")
    assert again != killed  # each recorder writes a candidate of its own


def test_a_candidate_cut_short_is_removed_once_stale(jars: Path) -> None:
    cut = _option(class_archive_args("driver", jars, java=JAVA), "ArchiveClassesAtExit")
    cut.write_bytes(b"\0" * 64)
    _age(cut, STALE_SECONDS + 1)
    class_archive_args("driver", jars, java=JAVA)
    assert not cut.exists()


def test_switched_off(jars: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MM2PY_CLASS_ARCHIVE", "0")
    assert class_archive_args("broker", jars, java=JAVA) == []


def _start_at(barrier: Any, jars: Path, cache: str) -> list[str]:
    os.environ["MM2PY_CACHE"] = cache
    barrier.wait()
    return class_archive_args("broker", jars, java=JAVA)


def test_parallel_starts_on_a_fresh_then_a_warm_cache_all_succeed_twenty_times(
    jars: Path, tmp_path: Path
) -> None:
    """Issue 48: clusters started together promoted the same candidate twice, and the second
    rename raised FileNotFoundError (62 tests errored on a machine's second run). Six processes
    released at once by a barrier, each round on a new cache: the first start of a role records;
    then, with the candidate whole, every parallel start maps the one archive; then again warm."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as manager, ctx.Pool(6) as pool:
        barrier = manager.Barrier(6)  # reusable: it resets once all six have passed
        for round_ in range(20):
            cache = str(tmp_path / f"cache-{round_}")
            os.environ["MM2PY_CACHE"] = cache
            recorder = _option(class_archive_args("broker", jars, java=JAVA), "ArchiveClassesAtExit")
            recorder.write_bytes(ARCHIVE_MAGIC + b"\0" * 60)  # the recording JVM exited
            for _warm in (False, True):
                starts = pool.starmap(_start_at, [(barrier, jars, cache)] * 6)
                archives = {_option(args, "SharedArchiveFile") for args in starts}
                assert len(archives) == 1, starts
                assert next(iter(archives)).read_bytes().startswith(ARCHIVE_MAGIC)
