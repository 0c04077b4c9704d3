"""Helpers for tests against real brokers: topics, producing test data, reading it all back."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mm2py.protocol.records import RecordBatch

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

#: Test record timestamps: an hour ago, fixed per run. Brokers delete segments whose newest
#: timestamp is older than retention (7 days), so test data must not be dated in the past.
BASE_TS = (int(time.time()) - 3600) * 1000


@dataclass(frozen=True)
class Rec:
    """One record as a test produces it or reads it back."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int = 0
    partition: int | None = None
    offset: int = field(default=-1, compare=False)

    def content(self) -> tuple[object, ...]:
        """What must survive mirroring: key, value, headers, timestamp."""
        return (self.key, self.value, self.headers, self.timestamp)


#: SASL users of the secured test clusters (PLAIN; ``alice`` also SCRAM-SHA-256/512)
SASL_USERS = {"alice": "alice-secret", "mirror": "mirror-secret", "reader": "reader-secret",
              "writer": "writer-secret"}


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    replication_factor: int = 1,
) -> str:
    client = _probe("admin", bootstrap)  # must outlive the future, or librdkafka destroys the request
    futures = client.create_topics(
        [NewTopic(name, partitions, replication_factor, config=dict(config or {}))]
    )
    futures[name].result(timeout=30)
    _wait_topic(bootstrap, name, partitions)
    return name


def _wait_topic(bootstrap: str, name: str, partitions: int, timeout: float = 30) -> None:
    a = _probe("admin", bootstrap)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = a.list_topics(name, timeout=5).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
            p.leader >= 0 for p in md.partitions.values()
        ):
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {name} not ready on {bootstrap}")


#: one kept client of each kind per cluster for the probes tests poll (end offsets, topic names):
#: a client made for each call cost ~24 ms of CPU (a third in the test, the rest in the broker) and
#: 50 ms, one kept 2.4 ms; tests poll them every 0.1-0.5 s while they wait
_PROBES: dict[tuple[str, str], Any] = {}
_PROBES_LOCK = threading.Lock()


def _probe(kind: str, bootstrap: str) -> Any:
    with _PROBES_LOCK:
        client = _PROBES.get((kind, bootstrap))
        if client is None:
            # quiet: a probe of a cluster a test stopped for good would log each reconnection
            # attempt; a call that cannot be answered still raises
            conf = {"bootstrap.servers": bootstrap, "log_level": 0}
            client = AdminClient(conf) if kind == "admin" else Consumer({**conf, "group.id": unique("probe")})
            _PROBES[(kind, bootstrap)] = client
        return client


def topic_names(bootstrap: str) -> set[str]:
    return set(_probe("admin", bootstrap).list_topics(timeout=10).topics)


def make_records(
    n: int, *, partition: int | None = None, start_ts: int = BASE_TS, tag: str = "r"
) -> list[Rec]:
    """Deterministic records with keys, headers (one null-valued) and explicit timestamps."""
    out = []
    for i in range(n):
        headers: tuple[tuple[str, bytes | None], ...] = (
            ("h-index", str(i).encode()),
            ("h-null", None),
        ) if i % 3 else ()
        out.append(
            Rec(
                key=None if i % 7 == 0 else f"{tag}-key-{i}".encode(),
                value=None if i % 11 == 5 else (f"{tag}-value-{i}-" + "x" * (i % 50)).encode(),
                headers=headers,
                timestamp=start_ts + i,
                partition=partition,
            )
        )
    return out


def produce_records(
    bootstrap: str,
    topic: str,
    records: Iterable[Rec],
    *,
    compression: str = "none",
    idempotent: bool = True,
    linger_ms: int = 5,
    extra: Mapping[str, str | int] | None = None,
) -> int:
    conf: dict[str, str | int | bool] = {
        "bootstrap.servers": bootstrap,
        "compression.type": compression,
        "linger.ms": linger_ms,
        "enable.idempotence": idempotent,
        "acks": "all",
    }
    conf.update(extra or {})
    p = Producer(conf)
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    count = 0
    for r in records:
        kwargs: dict[str, object] = {"timestamp": r.timestamp, "on_delivery": on_delivery}
        if r.partition is not None:
            kwargs["partition"] = r.partition
        if r.headers:
            kwargs["headers"] = list(r.headers)
        while True:
            try:
                p.produce(topic, r.value, r.key, **kwargs)
                break
            except BufferError:
                p.poll(0.05)
        count += 1
    remaining = p.flush(60)
    if remaining or errors:
        raise AssertionError(f"produce to {topic} failed: {remaining} undelivered, {errors[:3]}")
    return count


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end offset (fresh metadata and a ListOffsets request each call)."""
    return {p: end for p, (_start, end) in watermarks(bootstrap, topic).items()}


def start_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's log start offset (moved by retention or DeleteRecords), asked as
    :func:`end_offsets` asks the end."""
    return {p: start for p, (start, _end) in watermarks(bootstrap, topic).items()}


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """Each partition's (log start, end) offsets: fresh metadata and ListOffsets requests each call."""
    c = _probe("consumer", bootstrap)
    md = c.list_topics(topic, timeout=10).topics[topic]
    return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            for p in md.partitions}


def total(bootstrap: str, topic: str) -> int:
    """How many offsets ``topic`` holds (the sum of its partitions' end offsets; 0 while the
    topic or a leader is missing): what a test waits on instead of reading a topic again and again."""
    try:
        return sum(end_offsets(bootstrap, topic).values())
    except Exception:  # KafkaException, or KeyError for a topic that is not there yet
        return 0


def read_all(
    bootstrap: str,
    topic: str,
    *,
    isolation: str = "read_committed",
    timeout: float = 60,
    expect: int | None = None,
) -> list[Rec]:
    """Read every record of ``topic`` up to its current end (or until ``expect`` records arrived)."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": unique("reader"),
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    })
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        parts = sorted(md.partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        deadline = time.monotonic() + timeout
        out: list[Rec] = []
        eof: set[int] = set()
        while time.monotonic() < deadline:
            if expect is None and len(eof) == len(parts):
                break
            if expect is not None and len(out) >= expect:
                break
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    eof.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            eof.discard(msg.partition())
            hdrs = tuple(msg.headers() or ())
            out.append(Rec(msg.key(), msg.value(), hdrs, msg.timestamp()[1],
                           msg.partition(), msg.offset()))
        return out
    finally:
        c.close()


def placed_records(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """Every record of ``topic``: (partition, key, value)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("read"), "enable.partition.eof": True,
                  "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in parts}
        pending = {p for p, (low, high) in ends.items() if high > low}
        c.assign([TopicPartition(topic, p, ends[p][0]) for p in pending])
        out = []
        while pending:
            msg = c.poll(10)
            assert msg is not None, f"reading {topic} timed out"
            if msg.error() is not None:
                pending.discard(msg.partition() or 0)
                continue
            out.append((msg.partition() or 0, bytes(msg.key() or b""), msg.value()))
        return out
    finally:
        c.close()


def by_partition(records: Sequence[Rec]) -> dict[int | None, list[tuple[object, ...]]]:
    out: dict[int | None, list[tuple[object, ...]]] = {}
    for r in records:
        out.setdefault(r.partition, []).append(r.content())
    return out


#: single-node replication factors; heartbeats off, so that one test's heartbeat topics do not
#: become another test's mirrored partitions (tests of heartbeats turn them on)
TEST_DEFAULTS = {
    "replication.factor": 1,
    "offset-syncs.topic.replication.factor": 1,
    "checkpoints.topic.replication.factor": 1,
    "heartbeats.topic.replication.factor": 1,
    "emit.heartbeats.enabled": False,
    "heartbeats.replication.enabled": False,
}


def consume_and_commit(
    bootstrap: str, group: str, topic: str, counts: dict[int, int], poll_timeout: float = 5
) -> dict[int, int]:
    """Group ``group`` reads the first ``counts[p]`` records of each partition and commits; returns
    its committed source offsets."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    committed = {}
    try:
        for p, n in counts.items():
            c.assign([TopicPartition(topic, p, 0)])
            last = None
            for _ in range(n):
                last = c.poll(poll_timeout)
                assert last is not None and last.error() is None, (
                    f"source read failed: {last and last.error()}")
            assert last is not None
            committed[p] = last.offset() + 1
            c.commit(offsets=[TopicPartition(topic, p, committed[p])], asynchronous=False)
    finally:
        c.close()
    return committed


def config_doc(
    clusters: Mapping[str, str], flows: Mapping[str, Mapping[str, object]], **settings: object
) -> dict[str, object]:
    """A configuration for the test clusters (single-node replication factors, ``TEST_DEFAULTS``)
    in the nested form of a YAML or JSON file."""
    doc: dict[str, object] = {"clusters": dict(clusters), "flows": {k: dict(v) for k, v in flows.items()}}
    doc.update(TEST_DEFAULTS)
    doc.update(settings)
    return doc


def mirror_config(
    clusters: Mapping[str, str], flows: Mapping[str, Mapping[str, object]], **settings: object
) -> object:
    """A MirrorMakerConfig of :func:`config_doc`."""
    from mm2py.config.models import MirrorMakerConfig

    return MirrorMakerConfig.from_mapping(config_doc(clusters, flows, **settings))


def config_file(
    path: Path, clusters: Mapping[str, str], flows: Mapping[str, Mapping[str, object]], **settings: object
) -> Path:
    """:func:`config_doc` as a JSON file at ``path``, for an ``mm2py`` process."""
    path.write_text(json.dumps(config_doc(clusters, flows, **settings)))
    return path


# what a cluster answers while a just-created partition has no leader yet: "not yet", not a failure
_NOT_YET = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                      KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT, KafkaError._TRANSPORT})


def wait_until(predicate: object, timeout: float, interval: float = 0.5, what: str = "condition") -> float:
    """Poll ``predicate()`` until true; returns the seconds it took, fails the test on timeout.
    A transient cluster error raised by the predicate (a partition still electing its leader)
    counts as "not yet"; the last one is named if time runs out."""
    start, last = time.monotonic(), ""
    while True:
        try:
            if predicate():  # type: ignore[operator]
                return time.monotonic() - start
        except KafkaException as exc:
            if exc.args[0].code() not in _NOT_YET:
                raise
            last = f" (last: {exc.args[0].str()})"
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{last}")
        time.sleep(interval)


class BackgroundWorker:
    """Runs an in-process :class:`Worker` on its own event loop in a thread (tests stay synchronous).

    A worker whose start failed raises its error on entering. The worker leaves a flow whose
    cluster could not be reached FAILED and starts it again in the background; with
    ``all_started=True`` such a flow is an error on entering too (the worker stopped, the flow's
    reason named), for a test whose flows must all run: it fails at once instead of timing out."""

    def __init__(self, config: object, commit_interval: float = 0.5, *, all_started: bool = False,
                 **worker_options: Any) -> None:
        import asyncio
        import threading

        from mm2py.runtime.inprocess import Worker

        self.worker = Worker(config, commit_interval=commit_interval, **worker_options)  # type: ignore[arg-type]
        self.all_started = all_started
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        import asyncio

        asyncio.set_event_loop(self._loop)

        async def run() -> None:
            self._stop = asyncio.Event()
            try:
                await self.worker.start()
            finally:
                self._started.set()
            try:
                await self._stop.wait()
            finally:
                await self.worker.stop()

        try:
            self._loop.run_until_complete(run())
        except BaseException as exc:
            self.error = exc
            self._started.set()

    def __enter__(self) -> BackgroundWorker:
        self._thread.start()
        self._started.wait(120)
        if self.error is not None:
            raise self.error
        failed = self.failed_flows() if self.all_started else {}
        if failed:
            self.stop()
            raise AssertionError("flows not started: "
                                 + "; ".join(f"{name}: {why}" for name, why in failed.items()))
        return self

    def failed_flows(self) -> dict[str, str]:
        """Each flow left FAILED (at start, or by a background start retry), with its reason."""
        from mm2py.engine.task_contract import TaskState

        return {name: str(f.trace) for name, f in self.worker.flows.items() if f.state == TaskState.FAILED}

    def call(self, coro_fn: object, timeout: float = 60) -> object:
        """Run a coroutine on the worker's loop and wait for its result."""
        import asyncio

        fut = asyncio.run_coroutine_threadsafe(coro_fn(), self._loop)  # type: ignore[operator]
        return fut.result(timeout)

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)
        if self.error is not None:
            raise self.error

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_syncs(bootstrap: str, topic: str) -> list[Any]:
    """Every OffsetSync record of an offset-syncs topic (MM2 binary format)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("syncs"),
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    from mm2py.protocol.mm2_records import OffsetSync

    out = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        while True:
            msg = c.poll(5)
            assert msg is not None, "offset-syncs topic read timed out"
            err = msg.error()
            if err is not None:
                if err.code() == -191:
                    return out
                raise AssertionError(str(err))
            out.append(OffsetSync.from_record(msg.key(), msg.value()))
    finally:
        c.close()


def raw_batches(bootstrap: str, topic: str, partitions: int) -> dict[int, list[RecordBatch]]:
    """Every record batch of ``topic`` as stored (read_committed fetches: no aborted or control
    batches), per partition."""
    from mm2py.client.cluster import ClusterClient
    from mm2py.client.fetcher import FetcherConfig, RawFetcher
    from mm2py.protocol.types import TopicPartition

    async def fetch_all() -> dict[int, list[RecordBatch]]:
        client = ClusterClient(bootstrap)
        await client.start()
        try:
            fetcher = RawFetcher(client, FetcherConfig(max_wait_ms=100))
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            ends = await client.list_offsets(tps)
            pos = {tp: 0 for tp in tps}
            out: dict[int, list[RecordBatch]] = {p: [] for p in range(partitions)}
            while any(pos[tp] < ends[tp] for tp in tps):
                got = await fetcher.fetch({tp: o for tp, o in pos.items() if o < ends[tp]})
                for tp, f in got.items():
                    out[tp.partition].extend(RecordBatch(bytes(b)) for b in f.batches)
                    pos[tp] = max(pos[tp], f.next_offset)
            return out
        finally:
            await client.close()

    return asyncio.run(fetch_all())


def without_producer_state(b: RecordBatch) -> bytes:
    """Attributes onward, minus producerId/epoch/baseSequence (stripped for the target broker)."""
    raw = bytes(b)
    return raw[21:43] + raw[57:]


@contextmanager
def served_worker(config: object, rest: Any = None, **worker_options: Any) -> Iterator[str]:
    """An in-process worker on ``config`` (a :class:`BackgroundWorker`) with its REST API on a
    free loopback port, or on the listeners of ``rest`` (``RestSettings``: HTTPS, authentication);
    yields the API's base URL."""
    from mm2py.rest_api.server import RestServer

    with BackgroundWorker(config, **worker_options) as bg:

        async def start() -> Any:
            server = RestServer(bg.worker, "127.0.0.1", 0, settings=rest)
            await server.start()
            return server

        server: Any = bg.call(start)
        try:
            yield str(server.url)
        finally:
            bg.call(server.stop)
