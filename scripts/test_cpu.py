"""Which tests the suite's CPU goes to, brokers, JVMs and other child processes included.

    python scripts/test_cpu.py sample /tmp/cpu.tsv &     # beside the run; stopped by SIGTERM
    MM2PY_TEST_TIMELINE=/tmp/timeline.tsv make test
    kill %1
    python scripts/test_cpu.py report /tmp/timeline.tsv /tmp/cpu.tsv

``sample`` reads every process's CPU time once a second and writes, per second, the CPU used since
the last reading by each (xdist worker, kind of process) pair. A process belongs to the xdist
worker named by ``PYTEST_XDIST_WORKER`` in the environment it started with: the brokers, Spark
JVMs, MirrorMaker 2 workers and ``mm2py`` processes a worker starts inherit it (the worker's own
Python process sets it after it started, so its own CPU stays under ``main``: the timeline's ``own
cpu`` column has it). ``report`` gives each second's CPU to the test that ran on that worker then
(``scripts/test_timeline.py`` reads the same timeline) and prints the CPU by kind, by module and by
test. A process that lives less than a second may be missed; the sampler itself takes ~2% of a core.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: what a process is, by a part of its command line (the first that matches)
KINDS = (
    ("kafka.Kafka", "broker"), ("StorageTool", "kafka-tool"),
    ("CoarseGrainedExecutorBackend", "spark-executor"), ("deploy.master", "spark-master"),
    ("deploy.worker", "spark-worker"), ("SparkSubmit", "spark-driver"),
    ("spark.daemon", "spark-python"), ("pyspark", "spark-python"),
    ("ConnectDistributed", "mm2-connect"), ("MirrorMaker", "mm2-connect"),
    ("chrom", "chromium"), ("java", "java-other"), ("mm2py", "mm2py-process"), ("python", "python"),
)


def _kind(cmdline: str) -> str:
    return next((kind for part, kind in KINDS if part in cmdline), "other")


def sample(out: Path, interval: float = 1.0) -> None:
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    known: dict[tuple[str, str], tuple[str, str, int]] = {}  # (pid, start time) -> worker, kind, ticks
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    first = True
    with out.open("w") as f:
        while not stop:
            now, used = time.time(), Counter[tuple[str, str]]()
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    ticks, key = int(fields[11]) + int(fields[12]), (pid, fields[19])
                    if key not in known:
                        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                        worker = next((e.split(b"=", 1)[1].decode() for e in env
                                       if e.startswith(b"PYTEST_XDIST_WORKER=")), "main")
                        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                        # what ran before the first reading is not the run's
                        known[key] = (worker, _kind(cmdline.decode(errors="replace")), ticks if first else 0)
                    worker, kind, before = known[key]
                    known[key] = (worker, kind, ticks)
                    if ticks > before:
                        used[(worker, kind)] += ticks - before
                except (OSError, IndexError, ValueError):
                    continue  # gone meanwhile, or not ours to read
            first = False
            f.writelines(f"{now:.1f}\t{w}\t{k}\t{n / ticks_per_s:.2f}\n" for (w, k), n in used.items())
            f.flush()
            time.sleep(interval)


def report(timeline: Path, samples: Path, top: int) -> None:
    spans: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for line in timeline.read_text().splitlines():
        worker, start, end, _own, _reaped, nodeid = line.split("\t")
        if worker != "main":
            spans[worker].append((float(start), float(end), nodeid))
    by_kind: dict[str, float] = defaultdict(float)
    by_test: dict[str, float] = defaultdict(float)
    unplaced: dict[tuple[str, str], float] = defaultdict(float)
    module_kinds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for line in samples.read_text().splitlines():
        at, worker, kind, cpu = line.split("\t")
        t, used = float(at), float(cpu)
        by_kind[kind] += used
        # a reading covers the second before it; a test's set-up shows just before its start
        test = next((n for s, e, n in spans.get(worker, ()) if s - 1.0 <= t <= e + 0.5), None)
        if test is None:
            unplaced[(worker, kind)] += used
            continue
        by_test[test] += used
        module_kinds[test.split("::")[0].rsplit("/", 1)[-1]][kind] += used
    print(f"{sum(by_kind.values()):.0f} CPU s sampled: {_most(by_kind, 20)}")
    print(f"not in a test: {sum(unplaced.values()):.0f} s ({_most(unplaced, 5)})")
    print("\nchild processes' CPU by module (its worker's own CPU is in test_timeline.py):")
    modules = sorted(module_kinds.items(), key=lambda kv: -sum(kv[1].values()))
    for module, kinds in modules[:top]:
        print(f"{sum(kinds.values()):7.1f}  {module:36s} {_most(kinds, 4)}")
    print("\nby test:")
    for test, used in sorted(by_test.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{used:7.1f}  {test}")


def _most(counts: Mapping[Any, float], n: int) -> str:
    """The ``n`` largest, as "name seconds, ..." (a pair of names joined by a slash)."""
    items = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{'/'.join(k) if isinstance(k, tuple) else k} {v:.0f}" for k, v in items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample", help="read every process's CPU once a second until SIGTERM")
    s.add_argument("out", type=Path)
    r = sub.add_parser("report", help="the CPU by kind of process, module and test")
    r.add_argument("timeline", type=Path)
    r.add_argument("samples", type=Path)
    r.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    if args.command == "sample":
        sample(args.out)
    else:
        report(args.timeline, args.samples, args.top)


if __name__ == "__main__":
    main()
