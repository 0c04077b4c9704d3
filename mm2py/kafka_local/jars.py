"""Resolve the pinned Apache Kafka release's jars from Maven Central with Maven, cached between runs."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from mm2py.errors import Mm2pyError

KAFKA_VERSION = "4.1.1"
POM = Path(__file__).with_name("pom.xml")


class HarnessError(Mm2pyError):
    """The local Kafka harness could not do what was asked (missing tool, broker failed to start...)."""


def cache_root() -> Path:
    """Where jars and the dev clusters' files live: ``$MM2PY_CACHE`` or ``~/.cache/mm2py``."""
    root = os.environ.get("MM2PY_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "mm2py"


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise HarnessError(
            f"'{tool}' is not on PATH; run `make install` (it installs Java 17 and Maven) first"
        )
    return path


def resolve_jars(version: str = KAFKA_VERSION, *, profile: str | None = None) -> Path:
    """Return a directory holding every runtime jar of Kafka ``version`` (plus ``profile`` extras).

    The first call runs ``mvn dependency:copy-dependencies`` against the bundled pom; later calls
    reuse the directory. A file lock makes concurrent callers (tests, ``mm2py dev up``) safe.
    """
    name = f"kafka-{version}" + (f"-{profile}" if profile else "")
    libs = cache_root() / "jars" / name
    done = libs / ".complete"
    if done.exists():
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    with open(libs.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return libs
        staging = libs.with_name(name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [
            _require("mvn"), "-B", "-q", "-f", str(POM),
            f"-Dkafka.version={version}",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ]
        if profile:
            cmd.append(f"-P{profile}")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not any(staging.glob("kafka*.jar")):
            raise HarnessError(
                f"Maven could not resolve Kafka {version} jars (exit {proc.returncode}):\n"
                + (proc.stdout + proc.stderr)[-4000:]
            )
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        done.write_text(version)
    return libs


#: JVM options for processes that should start quickly rather than run fast for hours (C1 JIT only:
#: a test broker starts with ~40% less CPU); never for a peer whose speed is measured
QUICK_JVM = "-XX:TieredStopAtLevel=1"


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    return _require("java")
