"""In and out of Apache MirrorMaker 2 on one mm2.properties, under live traffic (issue 31).

The real MirrorMaker 2 4.1.1 in dedicated mode (``org.apache.kafka.connect.mirror.MirrorMaker``,
the jars the Connect differential test resolves) and ``mm2py run`` take turns on the same file,
with MM2's own worker keys in it; each hands over to the next through the progress topic
``mm2-offsets.<source>.internal`` that both read and write. Every record must arrive once and in
order per partition across every hand-over.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.connect_offsets import decode, progress_topic
from mm2py.protocol.partitioner import partition_for_key
from mm2py.rdkafka.admin import ClusterAdmin
from tests.support.brokers import (
    create_topic,
    end_offsets,
    placed_records,
    read_all,
    total,
    unique,
    wait_until,
)
from tests.support.live_producer import LiveProducer
from tests.support.mm2_process import mm2_command, mm2_properties, running, stop_process

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4


def _mm2py(cfg: Path) -> list[str]:
    return [sys.executable, "-m", "mm2py.cli", "run", "-c", str(cfg), "--log-level", "info"]


class Swap:
    """One source topic under live traffic, its remote topic, and the peers taking turns on it."""

    def __init__(self, east: KafkaCluster, west: KafkaCluster, work: Path, **extra: object) -> None:
        self.east, self.west, self.work = east, west, work
        self.src, self.dst = unique("a"), unique("b")
        self.topic = create_topic(east.bootstrap, unique("swap"), PARTITIONS)
        self.remote = f"{self.src}.{self.topic}"
        self.cfg = mm2_properties(work / "mm2.properties", self.src, self.dst, east.bootstrap, west.bootstrap,
                               self.topic, **extra)

    def turn(self, peer: str, stop: signal.Signals = signal.SIGTERM, more: int = 300) -> None:
        """Run ``peer`` until it has mirrored ``more`` records past where the target stood, then stop it."""
        start = total(self.west.bootstrap, self.remote)
        cmd = mm2_command(self.cfg, self.work) if peer == "mm2" else _mm2py(self.cfg)
        with running(cmd, self.work / f"{peer}.out") as proc:
            def moved() -> bool:
                assert proc.poll() is None, f"{peer} exited (see {self.work})"
                return total(self.west.bootstrap, self.remote) >= start + more

            wait_until(moved, 240, 0.5, f"{peer} mirroring {more} more records (see {self.work})")
            stop_process(proc, stop)

    def check(self, produced: int) -> tuple[int, int]:
        """(lost, duplicated) once the last peer caught up; every partition in the source's order."""
        source = read_all(self.east.bootstrap, self.topic)
        assert len(source) == produced
        target = read_all(self.west.bootstrap, self.remote)
        want = {p: [r.value for r in source if r.partition == p] for p in range(PARTITIONS)}
        got = {p: [r.value for r in target if r.partition == p] for p in range(PARTITIONS)}
        lost = sum(len(set(want[p]) - set(got[p])) for p in want)
        duplicated = len(target) - len({(r.partition, r.value) for r in target})
        for p in want:  # in order: the first copy of each record comes in the source's order
            firsts = list(dict.fromkeys(got[p]))
            assert firsts == want[p][:len(firsts)], f"partition {p} out of order"
        return lost, duplicated


def _caught_up(swap: Swap, peer: str, repeats: int = 0) -> None:
    """Run ``peer`` until the target holds the whole (stopped) source and the ``repeats`` expected
    to be mirrored twice (counting only the source would stop a peer that is still that many
    records short, on a slow machine), then stop it cleanly."""
    ends = end_offsets(swap.east.bootstrap, swap.topic)
    cmd = mm2_command(swap.cfg, swap.work) if peer == "mm2" else _mm2py(swap.cfg)
    with running(cmd, swap.work / f"{peer}.out") as proc:
        wait_until(lambda: total(swap.west.bootstrap, swap.remote) >= sum(ends.values()) + repeats, 240, 0.5,
                   f"{peer} catching up (see {swap.work})")
        stop_process(proc, signal.SIGTERM)


def _written_the_old_way(swap: Swap) -> int:
    """Rewrite the progress topic as an older mm2py with MM2 left it: each key's newest position
    outside its proper partition, a staler one (MM2's) at home. Returns the keys so rewritten.

    Only the swap topic's keys: MM2 also mirrors every heartbeats topic of the source, and earlier
    tests on the same ``east`` may have made some (their count is not the test's)."""
    topic = progress_topic(swap.src)
    records = placed_records(swap.west.bootstrap, topic)
    newest: dict[bytes, bytes | None] = {}
    oldest: dict[bytes, bytes | None] = {}
    for _, key, value in records:
        decoded = decode(key, value) if value is not None else None
        if decoded is not None and decoded[1].topic == swap.topic:
            newest[key] = value
            oldest.setdefault(key, value)
    n = len({p for p, _, _ in records} | set(end_offsets(swap.west.bootstrap, topic)))
    producer = Producer({"bootstrap.servers": swap.west.bootstrap, "acks": "all"})
    now = int(time.time() * 1000)
    for key, value in newest.items():
        home = partition_for_key(key, n)
        producer.produce(topic, value, key, partition=(home + 1) % n, timestamp=now)
        producer.produce(topic, oldest[key], key, partition=home, timestamp=now - 60_000)
    assert producer.flush(30) == 0
    return len(newest)


def test_mm2py_killed_mm2_mm2py_mm2_mm2py_lose_nothing_and_repeat_only_what_followed_the_kill(
        east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> None:
    """Five turns on one file under live traffic (one MirrorMaker 2 start per turn, so the turns
    share a test):

    1. mm2py first: it creates the internal topics as MM2 would (the progress topic with Connect's
       25 partitions, offset syncs and checkpoints with one, all compacted). SIGKILLed;
    2. MM2 starts on the topics mm2py made, without an error, and resumes at mm2py's last committed
       positions: the records mm2py had delivered after that commit are mirrored again, nothing
       else. SIGTERM;
    3. mm2py resumes where MM2 stopped. SIGTERM. Then the progress topic is made to look as an
       older mm2py left it and repaired with ``mm2py flow-offsets repair``;
    4. MM2 again. SIGTERM;
    5. mm2py catches up.

    Lost: none. Mirrored twice: exactly the records of step 2."""
    swap = Swap(east, west, tmp_path, **{"emit.checkpoints.enabled": "true"})
    with LiveProducer(east.bootstrap, swap.topic, PARTITIONS, per_tick=4) as live:
        swap.turn("mm2py", stop=signal.SIGKILL)
        layouts = {
            "progress": _layout(west, progress_topic(swap.src)),
            "offset syncs": _layout(east, f"mm2-offset-syncs.{swap.dst}.internal"),
            "checkpoints": _layout(west, f"{swap.src}.checkpoints.internal"),
        }
        assert layouts == {"progress": (25, "compact"), "offset syncs": (1, "compact"),
                           "checkpoints": (1, "compact")}
        at_kill = end_offsets(west.bootstrap, swap.remote)
        committed = {}
        for partition, key, value in placed_records(west.bootstrap, progress_topic(swap.src)):
            decoded = decode(key, value)
            assert decoded is not None and partition == partition_for_key(key, 25)
            _, tp, pos = decoded
            assert pos is not None and pos.target is not None
            committed[tp.partition] = pos.target  # the target's end at the position's commit
        # the records past the last commit: already on the target, mirrored again by MM2
        expected = sum(at_kill[p] - committed.get(p, 0) for p in range(PARTITIONS))
        swap.turn("mm2", more=300 + expected)
        errors = [line for line in (tmp_path / "mm2.log").read_text().splitlines() if "] ERROR " in line]
        assert not errors, errors[:5]
        swap.turn("mm2py")
        assert _written_the_old_way(swap) == PARTITIONS
        out = subprocess.run([sys.executable, "-m", "mm2py.cli", "flow-offsets", "repair", "-c",
                              str(swap.cfg), "--flow", f"{swap.src}->{swap.dst}", "--execute"],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        assert f"{PARTITIONS} outside their partition" in out.stdout, out.stdout
        swap.turn("mm2")
        produced = live.stop()
    _caught_up(swap, "mm2py", repeats=expected)
    assert swap.check(produced) == (0, expected)


def _layout(cluster: KafkaCluster, topic: str) -> tuple[int, str]:
    """(partitions, cleanup.policy) of a topic."""
    admin = ClusterAdmin("c", cluster.bootstrap)
    return admin.list_topics()[topic].partitions, admin.topic_configs([topic])[topic]["cleanup.policy"]
