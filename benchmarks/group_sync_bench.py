"""Consumer-group offset sync latency of mirrors, side by side, between two real Kafka clusters.

Not a test. For each peer in turn (mm2py in-process, Apache Kafka MirrorMaker 2 in dedicated mode),
on the same two clusters: a fresh source topic under live traffic (``rate_producer.py`` at
``--rate`` records/s), the peer mirroring it with ``sync.group.offsets.enabled=true`` and every
other setting at its default (checkpoints and group sync every 60 s, groups listed every 600 s;
mm2py's live sync on, its default). ``--groups`` consumer groups that never join commit the
source's end offsets every ``--commit-every`` s for ``--seconds`` s, staggered; they committed once
before the peer started, so both peers know them from their first group listing. One more group
(``new``) commits for the first time once the peer runs: a group created after the mirror started.

A commit counts as shown on the target when every partition of the target group holds an offset
beyond what the group had committed before (the source offset of a target offset is the same
number here: the topics carry no transactions and only the peer writes the target topic, from
offset 0, so the mirror keeps offsets; the script checks the end offsets agree). Its latency is the
target coordinator's time of that target commit (read from the target's ``__consumer_offsets``)
minus the time the script sent the source commit; one host, one clock. ``exact`` counts the
commits whose first shown target offsets equal the source offsets of that commit or a later one
of the group (a peer may skip a commit superseded before it looked). Commits not shown
``--drain`` s after the window rank as ``late``. Per peer it prints commits, shown, p50/p90/p99/max,
exact, and the new group's first commit latency::

    python benchmarks/group_sync_bench.py                       # mm2py then MM2, 180 s each
    python benchmarks/group_sync_bench.py --peers mm2py --seconds 60
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bench_support import (
    COMMANDS,
    OffsetProbe,
    Setup,
    compile_package,
    create_topic,
    peer_process,
    run_order,
    warm_group_coordinator,
)
from confluent_kafka import Consumer, TopicPartition
from latency_bench import local_clusters

from mm2py.protocol.consumer_offsets import OffsetCommit, decode_record
from mm2py.protocol.errors import ProtocolError
from mm2py.stores.commit_feed import ConsumerOffsetsFeed

PEERS = ("mm2py", "mm2")


@dataclass
class Commit:
    group: str
    sent: float  # wall clock s
    offsets: dict[int, int]
    before: dict[int, int]  # what the group had committed before (-1: nothing)
    shown: float | None = None  # target coordinator's commit time of the first target state past it
    shown_offsets: dict[int, int] = field(default_factory=dict)

    @property
    def latency(self) -> float:
        return math.inf if self.shown is None else self.shown - self.sent


@dataclass
class Result:
    peer: str
    commits: list[Commit] = field(default_factory=list)  # the existing groups' window commits
    new_group: Commit | None = None
    error: str = ""
    ends_agree: bool | None = None

    def percentile(self, q: float) -> float:
        lat = sorted(c.latency for c in self.commits)
        return lat[max(0, math.ceil(q * len(lat)) - 1)] if lat else math.nan


class TargetWatch:
    """The target groups' commits as the target coordinator writes them: every target offset each
    group held over time, from the target's ``__consumer_offsets``."""

    def __init__(self, bootstrap: str, groups: set[str]) -> None:
        self.feed = ConsumerOffsetsFeed({"bootstrap.servers": bootstrap},
                                        name=f"bench-{uuid.uuid4().hex[:6]}")
        self.feed.start(30)
        self.groups = groups
        self.state: dict[str, dict[int, int]] = {}
        #: per group: (commit time s, the group's offsets after it), in order
        self.history: dict[str, list[tuple[float, dict[int, int]]]] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        while not self.stopped.is_set():
            for _p, _o, key, value in self.feed.poll(0.2):
                try:
                    record = decode_record(key, value)
                except ProtocolError:
                    continue
                if (not isinstance(record, OffsetCommit) or record.group not in self.groups
                        or record.value is None):
                    continue
                with self.lock:
                    state = self.state.setdefault(record.group, {})
                    state[record.partition.partition] = record.value.offset
                    self.history.setdefault(record.group, []).append(
                        (record.value.commit_timestamp / 1000, dict(state)))

    def shown(self, commit: Commit, partitions: int) -> None:
        """Fill in when the target group first held offsets past ``commit.before`` everywhere."""
        with self.lock:
            for at, offsets in self.history.get(commit.group, []):
                if len(offsets) == partitions and all(offsets[p] > commit.before[p] for p in offsets):
                    commit.shown, commit.shown_offsets = at, dict(offsets)
                    return

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(10)
        self.feed.close()


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        sent = time.time()
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        return sent
    finally:
        c.close()


def producer_command(bootstrap: str, topic: str, workdir: Path, args: argparse.Namespace) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve().with_name("rate_producer.py")),
            "--bootstrap", bootstrap, "--topic", topic, "--rate", str(args.rate),
            "--partitions", str(args.partitions), "--record-size", "200", "--codec", "lz4",
            "--linger-ms", "5", "--stats", str(workdir / f"{topic}-producer.json")]


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:.0f} s")
        time.sleep(0.2)


def run_peer(peer: str, index: int, source: str, target: str, workdir: Path, args: argparse.Namespace,
             run: str) -> Result:
    res = Result(peer)
    src, dst = f"src{index}", f"dst{index}"
    topic = f"groupsync-{run}-{index}"
    prefix = f"gs-{run}-{index}-"
    groups = [f"{prefix}{k}" for k in range(args.groups)]
    new_group = f"{prefix}new"
    create_topic(source, topic, args.partitions)
    sync = [f"{src}->{dst}.sync.group.offsets.enabled=true", f"{src}->{dst}.groups={prefix}.*"]
    setup = Setup(source, target, topic, workdir, mm2py_props=[*sync, *args.mm2py_prop],
                  mm2_props=[*sync, *args.mm2_prop])
    cmd = COMMANDS[peer](setup, src, dst)
    probe, tprobe = OffsetProbe(source), OffsetProbe(target)
    watch = TargetWatch(target, {*groups, new_group})
    target_topic = f"{src}.{topic}"
    last: dict[str, dict[int, int]] = {}
    try:
        with contextlib.ExitStack() as stack:
            producer = stack.enter_context(peer_process(producer_command(source, topic, workdir, args),
                                                        workdir / f"{index}-{peer}-producer.out"))
            wait_for(lambda: sum((probe.ends(topic) or {}).values()) > 0, 30, "traffic")
            for g in groups:  # known to both peers from their first group listing
                ends = probe.ends(topic) or {}
                commit(source, g, topic, ends)
                last[g] = ends
            proc = stack.enter_context(peer_process(cmd, workdir / f"{index}-{peer}.out"))
            wait_for(lambda: proc.poll() is None and sum((tprobe.ends(target_topic) or {}).values()) > 0,
                     args.startup_timeout, f"record of {peer} on the target")
            time.sleep(args.warmup)
            start = time.monotonic()
            ends = probe.ends(topic) or {}
            res.new_group = Commit(new_group, commit(source, new_group, topic, ends), ends,
                                   dict.fromkeys(ends, -1))
            step = args.commit_every / len(groups)
            k = 0
            while time.monotonic() - start < args.seconds:
                due = start + (k + 1) * step
                time.sleep(max(0.0, due - time.monotonic()))
                g = groups[k % len(groups)]
                ends = probe.ends(topic) or {}
                res.commits.append(Commit(g, commit(source, g, topic, ends), ends, last[g]))
                last[g] = ends
                k += 1
            drain_end = time.monotonic() + args.drain
            while time.monotonic() < drain_end:
                for c in [*res.commits, res.new_group]:
                    if c.shown is None:
                        watch.shown(c, args.partitions)
                if all(c.shown is not None for c in [*res.commits, res.new_group]):
                    break
                time.sleep(0.5)
            if proc.poll() is not None:
                res.error = f"{peer} exited with status {proc.returncode}"
            os.kill(producer.pid, signal.SIGTERM)
            producer.wait(30)
            final = probe.ends(topic)
            wait_for(lambda: tprobe.ends(target_topic) == final, 60, "the mirror caught up")
            res.ends_agree = True
    except Exception as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    finally:
        watch.close()
        probe.close()
        tprobe.close()
    return res


def fmt(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    return "late" if math.isinf(seconds) else f"{seconds:.3f}"


def report(results: list[Result]) -> None:
    print("| peer | commits | shown | p50 s | p90 s | p99 s | max s | exact | new group's first commit s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        shown = [c for c in r.commits if c.shown is not None]
        # the first target state past a commit may be a later commit's (a peer that skipped it):
        # exact if it is the source offsets of one of the group's commits
        committed = {(c.group, tuple(sorted(c.offsets.items()))) for c in r.commits}
        exact = sum((c.group, tuple(sorted(c.shown_offsets.items()))) in committed for c in shown)
        new = fmt(r.new_group.latency) if r.new_group else "-"
        print(f"| {r.peer} | {len(r.commits)} | {len(shown)} | {fmt(r.percentile(0.5))} | "
              f"{fmt(r.percentile(0.9))} | {fmt(r.percentile(0.99))} | {fmt(r.percentile(1.0))} | "
              f"{exact}/{len(shown)} | {new} |" + (f" {r.error}" if r.error else ""))


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", default="mm2py,mm2", help="comma-separated subset of " + ",".join(PEERS))
    ap.add_argument("--rate", type=float, default=1000.0, help="records/s produced to the source")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--groups", type=int, default=4, help="groups committing in the window")
    ap.add_argument("--commit-every", type=float, default=10.0, help="s between two commits of a group")
    ap.add_argument("--seconds", type=float, default=180.0, help="the window of commits")
    ap.add_argument("--warmup", type=float, default=10.0, help="s after the peer's first record before it")
    ap.add_argument("--drain", type=float, default=150.0, help="s after the window for commits to show")
    ap.add_argument("--rounds", type=int, default=1, help="every other round in reverse order")
    ap.add_argument("--startup-timeout", type=float, default=300.0)
    ap.add_argument("--mm2py-prop", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--mm2-prop", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--source", help="source bootstrap servers (default: start a local cluster)")
    ap.add_argument("--target", help="target bootstrap servers (default: start a local cluster)")
    ap.add_argument("--workdir", type=Path, help="keep configs and logs here (default: a temp dir)")
    args = ap.parse_args(argv)
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    if not args.peers or set(args.peers) - set(PEERS):
        ap.error(f"--peers: choose from {','.join(PEERS)}")
    if bool(args.source) != bool(args.target):
        ap.error("give both --source and --target, or neither")
    if args.groups < 1 or args.commit_every <= 0 or args.seconds <= 0 or args.partitions < 1:
        ap.error("--groups, --partitions >= 1; --commit-every, --seconds > 0")
    return args


@contextlib.contextmanager
def clusters(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[str, str]]:
    if args.source:
        yield args.source, args.target
        return
    print(f"starting two single-node Kafka clusters in {workdir} ...", flush=True)
    with local_clusters(workdir) as (source, target, _pids):
        yield source, target


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    compile_package()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mm2py-groupsync-"))
    workdir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    began = time.monotonic()
    ok = False
    try:
        with clusters(args, workdir) as (source, target):
            for bootstrap in (source, target):
                warm_group_coordinator(bootstrap)
            run = uuid.uuid4().hex[:6]
            results = []
            for i, (peer, label) in enumerate(run_order(args.peers, args.rounds), start=1):
                print(f"running {label} ...", flush=True)
                res = run_peer(peer, i, source, target, workdir, args, run)
                res.peer = label
                print(f"  {label}: {len(res.commits)} commits, p50 {fmt(res.percentile(0.5))} s, p99 "
                      f"{fmt(res.percentile(0.99))} s" + (f" - {res.error}" if res.error else ""), flush=True)
                results.append(res)
        print(f"\n{datetime.now():%Y-%m-%d %H:%M}, {args.rate:g} records/s over {args.partitions} "
              f"partitions, "
              f"{args.groups} groups committing the source's end offsets every {args.commit_every:g} s for "
              f"{args.seconds:g} s, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
              f"whole run {time.monotonic() - began:.0f} s")
        report(results)
        ok = all(not r.error for r in results)
        return 0 if ok else 1
    finally:
        if ok and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"configs and logs kept in {workdir}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
