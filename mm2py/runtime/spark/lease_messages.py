"""The messages between a lease on an executor and the Spark driver's coordinator (pure codec).

One JSON object per line over a TCP connection the executor opens to the driver. Every message
from the executor names its lease and carries the driver's per-run token, so nothing but this
run's executors can steer or report. Malformed lines raise :class:`LeaseWireError`.

executor → driver: ``hello`` (the lease's first words, before it builds its task: the driver
accepts the attempt with an ``ack`` or refuses it with ``stop``), ``ready`` (task built, clients
connected, ready for GO), ``report`` (cumulative metrics of
the lease, lag, codec work; every report interval), ``released`` (stopped and committed: each
partition's position with its target offset, ``null`` where a produce outcome was in doubt).
driver → executor: ``go`` (positions carried over, ``null``: load and reconcile), ``stop``, ``ack``
(to every report: an executor that gets none for a fence interval stops by itself).

A mirror host (:mod:`mm2py.runtime.spark.executor.host`: one long-lived process per executor that
runs many leases) opens one connection for all of them: ``host_hello`` first (accepted with an
``ack`` or refused with ``stop``), then the driver sends ``start`` (a lease's work, pickled as Spark
pickles its closures) and every lease's messages travel on that connection, the driver's naming
their lease (``lease``; empty on a lease's own connection, and a ``stop`` with no lease stops the
host). When a lease ends on a host it says ``ended``: what a lease's Spark job returns otherwise.
Every stats interval a host says ``host_stats``: the process's own figures (requests it sent per
cluster and API, CPU seconds, resident bytes), which the driver's /metrics shows per host.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mm2py.engine.latency import Histogram, PartitionTimes
from mm2py.errors import Mm2pyError
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition

__all__ = [
    "Ack", "Ended", "GoMsg", "Hello", "HostHello", "HostStats", "LeaseWireError", "Ready", "Released",
    "Report", "StartLease", "StopMsg", "decode", "encode", "open_line_connection",
]

#: the longest line either side accepts (a report of thousands of partitions fits easily)
MAX_LINE = 4 * 1024 * 1024


async def open_line_connection(address: tuple[str, int],
                               timeout: float = 30.0) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An executor's connection to the driver's lease server, reading lines up to :data:`MAX_LINE`
    as the server does. asyncio's default is 64 KiB: at 10,000 partitions a lease's START (its
    partitions and positions) is longer, and a host that failed to read it was replaced, again
    and again (scale_bench, 2,500 partitions a lease)."""
    return await asyncio.wait_for(asyncio.open_connection(*address, limit=MAX_LINE), timeout)


class LeaseWireError(Mm2pyError):
    """A line that is not a lease message."""


@dataclass(frozen=True)
class Hello:
    lease: str
    token: str


@dataclass(frozen=True)
class Ready:
    lease: str
    token: str


@dataclass(frozen=True)
class Report:
    lease: str
    token: str
    metrics: Mapping[str, int] = field(default_factory=dict)
    lag: Mapping[TopicPartition, int] = field(default_factory=dict)
    codec: tuple[int, int] = (0, 0)  # decompressions, compressions during the lease
    #: during the lease, of the partitions whose times changed since the lease's last report
    times: Mapping[TopicPartition, PartitionTimes] = field(default_factory=dict)
    #: partitions held at a record the target refuses even alone (``TaskRunner.held_partitions``)
    held: tuple[str, ...] = ()
    #: partitions the target refuses, as the task's status shows them (``refused_partitions``)
    refused: tuple[Mapping[str, Any], ...] = ()
    #: what the task waits for the target on (``waiting_for_target``)
    waiting: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Released:
    lease: str
    token: str
    positions: Mapping[TopicPartition, Position | None] = field(default_factory=dict)


@dataclass(frozen=True)
class HostHello:
    """A mirror host's first words on its connection."""

    host: str
    token: str
    executor: str = ""  # where it runs (host name and the executor's Python daemon), for the logs
    attempt: int = 0  # its Spark task's attempt number (SPARK_GAVE_UP in driver/host_pool.py)


@dataclass(frozen=True)
class HostStats:
    """A mirror host's own figures, cumulative since it started (its process's)."""

    host: str
    token: str
    #: (cluster name, API key) -> requests its raw connections sent (``mm2py.client.request_counts``)
    requests: Mapping[tuple[str, int], int] = field(default_factory=dict)
    cpu_seconds: float = 0.0  # user + system
    rss_bytes: int = 0  # resident now


@dataclass(frozen=True)
class Ended:
    """A lease ended on a mirror host: what its own Spark job would have returned."""

    lease: str
    token: str
    granted: bool = False
    error: str | None = None
    halted: bool = False  # the error is an alarm under ``fail``
    positions: Mapping[TopicPartition, int] = field(default_factory=dict)  # committed
    metrics: Mapping[str, int] = field(default_factory=dict)
    codec: tuple[int, int] = (0, 0)
    times: Mapping[TopicPartition, PartitionTimes] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    seconds: float = 0.0
    executor: str = ""


@dataclass(frozen=True)
class StartLease:
    """The driver places a lease on a mirror host: ``work`` is its pickled ``LeaseWork``."""

    lease: str
    work: bytes


@dataclass(frozen=True)
class GoMsg:
    positions: Mapping[TopicPartition, Position | None]
    lease: str = ""


@dataclass(frozen=True)
class StopMsg:
    reason: str
    lease: str = ""


@dataclass(frozen=True)
class Ack:
    lease: str = ""


Message = (Hello | Ready | Report | Released | GoMsg | StopMsg | Ack | HostHello | HostStats | Ended
           | StartLease)


def _positions_out(positions: Mapping[TopicPartition, Position | None]) -> list[list[Any]]:
    """Rows ``[topic, partition, source, target, topic id]`` (a position's source topic id goes with
    it, so the next holder tells a topic created again during the hand-over)."""
    return [[tp.topic, tp.partition, None if p is None else p.source, None if p is None else p.target,
             None if p is None else p.topic_id] for tp, p in sorted(positions.items())]


def _positions_in(rows: Any) -> dict[TopicPartition, Position | None]:
    out: dict[TopicPartition, Position | None] = {}
    for row in rows:
        topic, partition, source, target, *rest = row  # an older driver's rows have no topic id
        topic_id = rest[0] if rest else None
        tp = TopicPartition(_str(topic), _int(partition))
        out[tp] = None if source is None else Position(_int(source), None if target is None else _int(target),
                                                       None if topic_id is None else _str(topic_id))
    return out


def _times_out(times: Mapping[TopicPartition, PartitionTimes]) -> list[list[Any]]:
    return [[tp.topic, tp.partition, t.replication.counts, t.replication.total, t.age.counts, t.age.total,
             t.lag_seconds] for tp, t in sorted(times.items())]


def _times_in(rows: Any) -> dict[TopicPartition, PartitionTimes]:
    out: dict[TopicPartition, PartitionTimes] = {}
    for topic, partition, rep, rep_sum, age, age_sum, lag in rows:
        tp = TopicPartition(_str(topic), _int(partition))
        out[tp] = PartitionTimes(Histogram.of([_int(n) for n in rep], _float(rep_sum)),
                                 Histogram.of([_int(n) for n in age], _float(age_sum)), _float(lag))
    return out


def _float(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise LeaseWireError(f"expected a number, got {value!r}")
    return float(value)


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise LeaseWireError(f"expected an integer, got {value!r}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise LeaseWireError(f"expected true or false, got {value!r}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise LeaseWireError(f"expected a string, got {value!r}")
    return value


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise LeaseWireError(f"expected an object, got {value!r}")
    return value


def _lease_of(doc: Mapping[str, Any]) -> str:
    return _str(doc.get("lease", ""))


def encode(msg: Message) -> bytes:
    doc: dict[str, Any]
    if isinstance(msg, HostHello):
        doc = {"t": "host_hello", "host": msg.host, "token": msg.token, "executor": msg.executor,
               "attempt": msg.attempt}
    elif isinstance(msg, HostStats):
        doc = {"t": "host_stats", "host": msg.host, "token": msg.token,
               "requests": [[c, k, n] for (c, k), n in sorted(msg.requests.items())],
               "cpu": msg.cpu_seconds, "rss": msg.rss_bytes}
    elif isinstance(msg, Ended):
        doc = {"t": "ended", "lease": msg.lease, "token": msg.token, "granted": msg.granted,
               "error": msg.error, "halted": msg.halted,
               "positions": [[tp.topic, tp.partition, v] for tp, v in sorted(msg.positions.items())],
               "metrics": dict(msg.metrics), "codec": list(msg.codec), "times": _times_out(msg.times),
               "warnings": list(msg.warnings), "seconds": msg.seconds, "executor": msg.executor}
    elif isinstance(msg, StartLease):
        doc = {"t": "start", "lease": msg.lease, "work": base64.b64encode(msg.work).decode("ascii")}
    elif isinstance(msg, Hello):
        doc = {"t": "hello", "lease": msg.lease, "token": msg.token}
    elif isinstance(msg, Ready):
        doc = {"t": "ready", "lease": msg.lease, "token": msg.token}
    elif isinstance(msg, Report):
        doc = {"t": "report", "lease": msg.lease, "token": msg.token, "metrics": dict(msg.metrics),
               "lag": [[tp.topic, tp.partition, v] for tp, v in sorted(msg.lag.items())],
               "codec": list(msg.codec), "times": _times_out(msg.times), "held": list(msg.held),
               "refused": [dict(r) for r in msg.refused], "waiting": [dict(w) for w in msg.waiting]}
    elif isinstance(msg, Released):
        doc = {"t": "released", "lease": msg.lease, "token": msg.token,
               "positions": _positions_out(msg.positions)}
    elif isinstance(msg, GoMsg):
        doc = {"t": "go", "positions": _positions_out(msg.positions), "lease": msg.lease}
    elif isinstance(msg, StopMsg):
        doc = {"t": "stop", "reason": msg.reason, "lease": msg.lease}
    else:
        doc = {"t": "ack", "lease": msg.lease}
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> Message:
    try:
        doc = json.loads(line)
        kind = doc["t"]
        if kind == "hello":
            return Hello(_str(doc["lease"]), _str(doc["token"]))
        if kind == "ready":
            return Ready(_str(doc["lease"]), _str(doc["token"]))
        if kind == "report":
            lag = {TopicPartition(_str(t), _int(p)): _int(v) for t, p, v in doc["lag"]}
            metrics = {_str(k): _int(v) for k, v in doc["metrics"].items()}
            d, c = doc["codec"]
            return Report(_str(doc["lease"]), _str(doc["token"]), metrics, lag, (_int(d), _int(c)),
                          _times_in(doc.get("times", [])), tuple(_str(h) for h in doc.get("held", [])),
                          tuple(_object(r) for r in doc.get("refused", [])),
                          tuple(_object(w) for w in doc.get("waiting", [])))
        if kind == "released":
            return Released(_str(doc["lease"]), _str(doc["token"]), _positions_in(doc["positions"]))
        if kind == "go":
            return GoMsg(_positions_in(doc["positions"]), _lease_of(doc))
        if kind == "stop":
            return StopMsg(_str(doc["reason"]), _lease_of(doc))
        if kind == "ack":
            return Ack(_lease_of(doc))
        if kind == "host_hello":
            return HostHello(_str(doc["host"]), _str(doc["token"]), _str(doc.get("executor", "")),
                             _int(doc.get("attempt", 0)))
        if kind == "host_stats":
            return HostStats(_str(doc["host"]), _str(doc["token"]),
                             {(_str(c), _int(k)): _int(n) for c, k, n in doc["requests"]},
                             _float(doc["cpu"]), _int(doc["rss"]))
        if kind == "start":
            return StartLease(_str(doc["lease"]), base64.b64decode(_str(doc["work"]), validate=True))
        if kind == "ended":
            error = doc["error"]
            return Ended(
                _str(doc["lease"]), _str(doc["token"]), _bool(doc["granted"]),
                None if error is None else _str(error), _bool(doc["halted"]),
                {TopicPartition(_str(t), _int(p)): _int(v) for t, p, v in doc["positions"]},
                {_str(k): _int(v) for k, v in doc["metrics"].items()},
                (_int(doc["codec"][0]), _int(doc["codec"][1])), _times_in(doc["times"]),
                tuple(_str(w) for w in doc["warnings"]), _float(doc["seconds"]), _str(doc["executor"]))
    except LeaseWireError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise LeaseWireError(f"not a lease message ({exc}): {bytes(line[:200])!r}") from None
    raise LeaseWireError(f"unknown lease message type {kind!r}")
