"""Where a suite run's time goes, from the file ``MM2PY_TEST_TIMELINE`` names (tests/conftest.py).

    MM2PY_TEST_TIMELINE=/tmp/timeline.tsv make test
    python scripts/test_timeline.py /tmp/timeline.tsv

Prints each xdist worker's busy span and the time it sat idle at the end (the run's tail: what
longest-first scheduling could still win), and the test modules by wall time with the CPU their
worker and the child processes it reaped meant spent in them (brokers shared by modules are not
reaped until the end and are not counted).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Row:
    worker: str
    start: float
    end: float
    own_cpu: float
    reaped_cpu: float
    nodeid: str

    @property
    def module(self) -> str:
        return self.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")


def read(path: Path) -> list[Row]:
    rows = []
    for line in path.read_text().splitlines():
        f = line.split("\t")
        if len(f) == 6:
            rows.append(Row(f[0], float(f[1]), float(f[2]), float(f[3]), float(f[4]), f[5]))
        elif len(f) == 5:  # written before the reaped children's CPU was recorded
            rows.append(Row(f[0], float(f[1]), float(f[2]), float(f[3]), 0.0, f[4]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("timeline", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    rows = read(args.timeline)
    side = [r for r in rows if r.worker == "main"]  # the unit pass make test runs beside pytest
    if len(side) < len(rows):
        rows = [r for r in rows if r.worker != "main"]
        print(f"beside the xdist run: {len(side)} tests, {sum(r.own_cpu for r in side):.0f} CPU s")
    if not rows:
        raise SystemExit(f"{args.timeline}: no test recorded")
    t0, t1 = min(r.start for r in rows), max(r.end for r in rows)
    print(f"{len(rows)} tests over {t1 - t0:.0f} s")
    by_worker: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_worker[r.worker].append(r)
    print(f"{'worker':<8} {'first':>6} {'last':>6} {'in tests':>9} {'idle at end':>12}")
    for w in sorted(by_worker):
        rs = by_worker[w]
        first, last = min(r.start for r in rs) - t0, max(r.end for r in rs) - t0
        busy = sum(r.end - r.start for r in rs)
        print(f"{w:<8} {first:6.0f} {last:6.0f} {busy:9.0f} {t1 - t0 - last:12.0f}")
    mods: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        mods[r.module].append(r)
    print(f"\n{'module':<40} {'wall':>6} {'own cpu':>8} {'reaped':>7} {'tests':>6} {'worker':>7} {'from':>5}")
    ranked = sorted(mods.items(), key=lambda kv: -sum(r.end - r.start for r in kv[1]))
    for name, rs in ranked[: args.top]:
        wall = sum(r.end - r.start for r in rs)
        own, reaped = sum(r.own_cpu for r in rs), sum(r.reaped_cpu for r in rs)
        start = min(r.start for r in rs) - t0
        print(f"{name:<40} {wall:6.0f} {own:8.0f} {reaped:7.0f} {len(rs):6d} {rs[0].worker:>7} {start:5.0f}")


if __name__ == "__main__":
    main()
