"""Class-data sharing for the harness's JVMs: a broker or a Spark driver starts with half the CPU.

Most of a JVM's start-up CPU goes to loading and verifying classes (a Kafka broker loads about
7,000, a Spark driver many more). Java 17 can map them from an archive instead (AppCDS). Measured
on a 2-core machine, CPU until ready: a test broker 3.5-4.6 s, with the archive 2.0 s; a local
Spark driver and its first job 8.2 s, with the archive 3.8 s.

One archive per role (a broker, Kafka's storage tool, MirrorMaker 2, a Spark driver, ...), made by
the JVM itself:

1. **record**: the first JVM of a role writes the classes it loaded to a candidate file when it
   exits (``-XX:ArchiveClassesAtExit``; about 5 s of CPU at exit, once per machine). Only one JVM at
   a time records; one that is killed leaves nothing, and another records after
   :data:`STALE_SECONDS`;
2. **map**: every later JVM of the role maps the archive (``-XX:SharedArchiveFile``).

The JVM writes an archive's header last, after every region, so a candidate whose header carries
the archive magic is whole: it is renamed into place by the next start that finds it. Starts run
in parallel (a harness starts its clusters together), so promotion has one promoter at a time: it
holds the role's lock file (``flock``) and looks again under it; the others wait for it, then find
the archive in place (or no whole candidate, and run without one). A candidate that vanishes while
a process looks at it (another promoter, a stale-candidate sweep) is passed over, never an error. This works
for JVMs whose class path another launcher builds (Spark's), since the archive records the class
path it was made with, and the JVM maps it only when its own class path matches (``-Xshare:auto``:
otherwise it runs without). Everything lives in ``<cache>/cds``, named by the role and a digest of
the ``java`` binary and of every jar (name, size, modification time): a new JDK or another jar set
never meets a stale archive. ``MM2PY_CLASS_ARCHIVE=0`` turns all of it off.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
import uuid
from pathlib import Path

from .jars import cache_root, java_executable

__all__ = ["ARCHIVE_MAGIC", "STALE_SECONDS", "class_archive_args"]

#: the first four bytes of a whole dynamic archive (HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC), native order
ARCHIVE_MAGIC = (0xF00BABA8).to_bytes(4, "little")
#: the JVM's class-sharing warnings (a class it cannot archive, an archive it cannot map) on
#: standard error: standard output may be a program's answer (a test reads a Java program's)
QUIET_STDOUT = ("-Xlog:cds*=off", "-Xlog:cds*=warning:stderr")
#: a recording claim older than this belongs to a JVM that was killed or is still running for long
STALE_SECONDS = 180.0


def class_archive_args(role: str, jars: Path, *, java: str | None = None) -> list[str]:
    """JVM options for a JVM of ``role`` whose classes come from the jars in ``jars``: map the
    role's archive, record it, or nothing (another JVM is recording it)."""
    if os.environ.get("MM2PY_CLASS_ARCHIVE", "1") == "0":
        return []
    root = cache_root() / "cds"
    root.mkdir(parents=True, exist_ok=True)
    base = root / f"{role}-{_digest(jars, java or java_executable())}"
    archive = base.with_suffix(".jsa")
    if archive.exists() or _promote(base, archive):
        return [*QUIET_STDOUT, f"-XX:SharedArchiveFile={archive}", "-Xshare:auto"]
    if not _claim(base.with_suffix(".recording")):
        return []
    candidate = base.with_name(f"{base.name}.{uuid.uuid4().hex[:8]}.jsa-candidate")
    return [*QUIET_STDOUT, f"-XX:ArchiveClassesAtExit={candidate}"]


def _digest(jars: Path, java: str) -> str:
    real = Path(java).resolve()
    st = real.stat()
    h = hashlib.sha256(f"{real}:{st.st_size}:{st.st_mtime_ns}".encode())
    for jar in sorted(jars.glob("*.jar")):
        js = jar.stat()
        h.update(f"|{jar.name}:{js.st_size}:{js.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _promote(base: Path, archive: Path) -> bool:
    """Rename a whole candidate into place; True once the archive is there.

    Invariant: one promoter per role at a time (the ``.promote`` lock), and the archive's path only
    ever holds a whole archive (``os.replace`` of a whole candidate is atomic)."""
    candidates = sorted(base.parent.glob(f"{base.name}.*.jsa-candidate"))
    if not candidates:
        return archive.exists()
    with open(base.with_suffix(".promote"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if archive.exists():
            return True  # the promoter before us put it there
        for candidate in candidates:
            try:
                with candidate.open("rb") as f:
                    whole = f.read(4) == ARCHIVE_MAGIC
                if whole:
                    candidate.replace(archive)
                    base.with_suffix(".recording").unlink(missing_ok=True)
                    return True
                if time.time() - candidate.stat().st_mtime > STALE_SECONDS:
                    candidate.unlink(missing_ok=True)  # cut short by a kill while it was written
            except FileNotFoundError:
                continue  # swept or promoted by a process outside the lock's reach (an older mm2py)
        return archive.exists()


def _claim(marker: Path) -> bool:
    """Create ``marker`` if no one has, or if the one there is stale; True if the caller owns it."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        return True
    except FileExistsError:
        pass
    try:
        stale = time.time() - marker.stat().st_mtime > STALE_SECONDS
    except FileNotFoundError:
        stale = True
    if not stale:
        return False
    marker.unlink(missing_ok=True)
    return _claim(marker)
