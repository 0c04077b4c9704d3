"""`make demo`: two local clusters and a live east->west mirror flow.

Starts (or reuses) the dev clusters, seeds a few topics on east with data in several codecs, keeps
producing a trickle of new records, and runs an east->west flow (the one in
``examples/east-to-west.properties``, pointed at the clusters' actual addresses) in this process,
printing source and target end offsets side by side until Ctrl-C (or ``--seconds``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import threading
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mm2py import interrupts
from mm2py.config.models import FlowConfig, MirrorMakerConfig
from mm2py.kafka_local import dev
from mm2py.rest_api.server import RestServer
from mm2py.runtime.inprocess import Worker

#: the flow of examples/east-to-west.properties
FLOW = {
    "flows": {"east->west": {"topics": ".*", "tasks.max": 2, "refresh.topics.interval.seconds": 10}},
    "replication.factor": 1,
    "offset-syncs.topic.replication.factor": 1,
    "checkpoints.topic.replication.factor": 1,
    "heartbeats.topic.replication.factor": 1,
}
TOPICS = {"orders": ("zstd", 4), "payments": ("lz4", 2), "clicks": ("gzip", 3)}


def _seed(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=10).topics
    new = [NewTopic(t, n, 1) for t, (_, n) in TOPICS.items() if t not in existing]
    for fut in admin.create_topics(new).values() if new else []:
        fut.result(30)
    for topic, (codec, _) in TOPICS.items():
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20})
        for i in range(20_000):
            p.produce(topic, f"{topic} seed record {i}".encode(), f"key-{i % 97}".encode(),
                      headers=[("origin", b"demo")])
            if i % 5000 == 0:
                p.poll(0)
        p.flush(30)


def _trickle(bootstrap: str, stop: threading.Event) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": "snappy", "linger.ms": 50})
    i = 0
    while not stop.is_set():
        for topic in TOPICS:
            p.produce(topic, f"{topic} live record {i}".encode(), f"key-{i % 97}".encode())
        i += 1
        p.poll(0)
        time.sleep(0.01)
    p.flush(10)


def _end_offsets(bootstrap: str, topics: list[str]) -> dict[str, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "mm2py-demo-probe"})
    out = {}
    try:
        md = c.list_topics(timeout=10).topics
        for t in topics:
            if t not in md:
                out[t] = 0
                continue
            out[t] = sum(
                c.get_watermark_offsets(CKTopicPartition(t, p), timeout=10)[1] for p in md[t].partitions
            )
    finally:
        c.close()
    return out


async def _run(east_bootstrap: str, west_bootstrap: str, seconds: float | None, rest_port: int) -> None:
    config = MirrorMakerConfig.from_mapping(
        {"clusters": {"east": east_bootstrap, "west": west_bootstrap}, **FLOW}
    )
    flow = config.enabled_flows()[0]
    east, west = flow.source_cluster.bootstrap_servers, flow.target_cluster.bootstrap_servers
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with interrupts.stop_on_signals(lambda: loop.call_soon_threadsafe(stop.set)):  # a 2nd Ctrl-C forces
        await _mirror(east, west, config, flow, stop, seconds, rest_port)


async def _mirror(east: str, west: str, config: MirrorMakerConfig, flow: FlowConfig, stop: asyncio.Event,
                  seconds: float | None, rest_port: int) -> None:
    trickle_stop = threading.Event()
    threading.Thread(target=_trickle, args=(east, trickle_stop), daemon=True).start()
    worker = Worker(config)
    await worker.start()
    rest = await _serve(worker, rest_port) if rest_port else None
    started = time.monotonic()
    print(f"mirroring {flow.name} ({east} -> {west}); Ctrl-C stops and commits progress")
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 5)
            runner = worker.flows.get(flow.name)  # replaced when a REST change restarts the flow
            topics = runner.last_plan.topics if runner is not None and runner.last_plan else {}
            # the target first: records produced meanwhile then show as lag, never as a surplus
            dst = await asyncio.to_thread(_end_offsets, west, list(topics.values()))
            src = await asyncio.to_thread(_end_offsets, east, list(topics))
            print(f"\n{'source topic':14} {'east records':>12}   {'target topic':18} {'west records':>12}"
                  f" {'behind':>7}")
            for s, t in sorted(topics.items()):
                print(f"{s:14} {src[s]:>12}   {t:18} {dst[t]:>12} {src[s] - dst[t]:>7}")
            if seconds is not None and time.monotonic() - started >= seconds:
                break
    finally:
        trickle_stop.set()
        if rest is not None:
            await rest.stop()
        await worker.stop()
        print("stopped; progress committed. `mm2py dev down` stops the clusters.")


async def _serve(worker: Worker, port: int) -> RestServer | None:
    try:
        rest = RestServer(worker, "127.0.0.1", port)
    except OSError as exc:
        print(f"(no REST API: {exc})")
        return None
    await rest.start()
    print(f"REST API: {rest.url}/flows — e.g. stop mirroring clicks while the flow runs:\n"
          f"  curl -X PATCH {rest.url}/flows/east/west -H 'content-type: application/json'"
          """ -d '{"topics.exclude": ["clicks"]}'""")
    return rest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mm2py.cli.demo", description=__doc__)
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long")
    parser.add_argument("--rest-port", type=int, default=8083, help="REST API port (0: no API)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("mm2py.librdkafka").setLevel(logging.ERROR)
    clusters = dev.up()
    for c in clusters:
        print(f"{c.name:6} bootstrap.servers={c.bootstrap}")
    by_name = {c.name: c.bootstrap for c in clusters}
    _seed(by_name["east"])
    asyncio.run(_run(by_name["east"], by_name["west"], args.seconds, args.rest_port))
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.guarded(main))  # Ctrl-C before the flow runs: 130, no traceback
