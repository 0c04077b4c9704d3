"""Fuzz the worker's whole HTTP API with schemathesis: no request may get a server error (5xx).

Starts two local clusters (east, west; :mod:`mm2py.kafka_local`), an in-process worker mirroring
``east->west`` with its REST API on a loopback port, a consumer group with commits, and Kafka Connect
connectors (a MirrorSourceConnector ``m`` with a flow of its own, a checkpoint and a heartbeat
connector), then runs ``st run --checks not_a_server_error`` over ``/openapi.json``: the ``/flows``
API, the Connect facade, ``/admin/loggers``, ``/metrics``, and the operator page's routes (hidden
from the published document: :data:`UI_PATHS` adds them to this run's copy).
Path parameters are drawn half the time from the names that exist (so the routes of a flow, a
connector, a group reach past their 404) and otherwise generated.

    python scripts/rest_fuzz.py                  # schemathesis' defaults, a few minutes
    python scripts/rest_fuzz.py -- -n 20 --seed 1   # anything after -- goes to `st run`
    python scripts/rest_fuzz.py --secured        # over HTTPS behind Connect's Basic authentication

``--secured`` serves the API as a secured Connect worker is served (an HTTPS listener with a
certificate made for the run, Connect's BasicAuthSecurityRestExtension with its JAAS and users
files): ``st run`` logs in (``--auth``, ``--tls-verify`` with the run's CA), and every operation is
first sent once with no credentials, each of which must answer 401.

Exits with st's status (0: no server error). Needs schemathesis (the ``dev`` extra) and Java.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import ssl
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this checkout's mm2py, installed or not
    sys.path.insert(1, str(ROOT))

from mm2py.config.models import MirrorMakerConfig  # noqa: E402
from mm2py.kafka_local import KafkaCluster, start_all  # noqa: E402
from mm2py.rest_api.security.settings import BASIC_AUTH_EXTENSION, RestSettings, rest_settings  # noqa: E402
from mm2py.rest_api.server import RestServer  # noqa: E402
from mm2py.runtime.inprocess import Worker  # noqa: E402

TOPIC = "fuzz.orders"
GROUP = "fuzz-group"
SOURCE = "org.apache.kafka.connect.mirror.MirrorSourceConnector"

#: values the path and query parameters are drawn from half the time (schemathesis dictionaries)
KNOWN: dict[str, list[str | int]] = {
    "names": ["east->west", "m", "cp", "hb"],
    "aliases": ["east", "west"],
    "groups": [GROUP],
    "plugins": ["MirrorSourceConnector", "MirrorCheckpointConnector", "MirrorHeartbeatConnector", SOURCE],
    "loggers": ["mm2py", "root", "mm2py.rest_api"],
    "tasks": [0, 1],
    "topics": [TOPIC],
}
PARAMETERS = {
    "path.name": "names", "path.source": "aliases", "path.target": "aliases", "path.group": "groups",
    "path.plugin": "plugins", "path.logger": "loggers", "path.task": "tasks",
    "query.flow": "names", "query.topic": "topics",
}


def _get(summary: str, *query: tuple[str, str]) -> dict[str, Any]:
    parameters = [{"name": name, "in": "query", "required": True, "schema": {"type": kind}}
                  for name, kind in query]
    return {"get": {"summary": summary, "parameters": parameters,
                    "responses": {"200": {"description": "OK"}, "404": {"description": "no such series"}}}}


#: the operator page's routes (``include_in_schema=False`` in :func:`mm2py.rest_api.ui.page.ui_router`)
UI_PATHS = {
    "/ui": _get("the page"), "/ui/app.js": _get("its script"), "/ui/style.css": _get("its style"),
    "/ui/state": _get("everything the page shows"),
    "/ui/partition": _get("one partition's series", ("flow", "string"), ("topic", "string"),
                          ("partition", "integer")),
}


def st_config() -> str:
    """schemathesis.toml: the dictionaries of :data:`KNOWN`, bound to the parameters at 50%."""
    lines = []
    for name, values in KNOWN.items():
        quoted = ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in values)
        lines += [f"[dictionaries.{name}]", f"values = [{quoted}]", ""]
    lines.append("[parameters]")
    lines += [f'"{key}" = {{ dictionary = "{d}", probability = 0.5 }}' for key, d in PARAMETERS.items()]
    return "\n".join(lines) + "\n"


def worker_config(east: KafkaCluster, west: KafkaCluster) -> MirrorMakerConfig:
    return MirrorMakerConfig.from_flat({
        "clusters": "east, west", "east.bootstrap.servers": east.bootstrap,
        "west.bootstrap.servers": west.bootstrap, "east->west.enabled": "true",
        "east->west.topics": r"fuzz\..*", "refresh.topics.interval.seconds": "30",
        "emit.checkpoints.interval.seconds": "5", "sync.group.offsets.enabled": "true",
        # one broker per cluster
        **{f"{prefix}replication.factor": "1" for prefix in (
            "", "offset-syncs.topic.", "checkpoints.topic.", "heartbeats.topic.")},
    })


def seed(east: KafkaCluster) -> None:
    """A topic with records and a group with commits on the source."""
    admin = AdminClient({"bootstrap.servers": east.bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic("fuzzm.events", 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": east.bootstrap})
    for i in range(40):
        producer.produce(TOPIC, f"record {i}".encode(), partition=i % 2)
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": east.bootstrap, "group.id": GROUP})
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 10), TopicPartition(TOPIC, 1, 5)], asynchronous=False)
    consumer.close()


async def connectors(http: httpx.AsyncClient, east: KafkaCluster, west: KafkaCluster) -> None:
    """``m`` (a flow of its own, topics ``fuzzm.*``), and the pair's checkpoint and heartbeat connectors."""
    base = {"source.cluster.alias": "east", "target.cluster.alias": "west",
            "source.cluster.bootstrap.servers": east.bootstrap,
            "target.cluster.bootstrap.servers": west.bootstrap}
    for name, config in {
        "m": {"connector.class": SOURCE, "topics": r"fuzzm\..*", "tasks.max": "1"},
        "cp": {"connector.class": "MirrorCheckpointConnector", "groups": ".*"},
        "hb": {"connector.class": "MirrorHeartbeatConnector"},
    }.items():
        r = await http.post("/connectors", json={"name": name, "config": {**base, **config}})
        r.raise_for_status()


#: the user ``--secured`` logs in as
LOGIN = ("fuzzer", "fuzz-pw-0c4e")


def secured(work: Path) -> tuple[RestSettings, Path]:
    """An HTTPS listener with Connect's Basic authentication (files as Connect's), and its CA."""
    from tests.support.rest_security import Pki, connect_basic_auth_files

    pki = Pki(work)
    jaas = connect_basic_auth_files(work, dict([LOGIN]))
    settings = rest_settings(pki.https_keys(**{"rest.extension.classes": BASIC_AUTH_EXTENSION}),
                             jaas_config=str(jaas))
    assert settings is not None
    return settings, pki.ca


async def refused_without_credentials(url: str, ca: Path, document: dict[str, Any]) -> list[str]:
    """Every operation sent once with no credentials: those that did not answer 401."""
    wrong = []
    verify = ssl.create_default_context(cafile=str(ca))
    async with httpx.AsyncClient(base_url=url, verify=verify, timeout=60) as anonymous:
        for path, item in document["paths"].items():
            for method in item:
                url = path.replace("{", "").replace("}", "")
                status = (await anonymous.request(method.upper(), url)).status_code
                if status != 401:
                    wrong.append(f"{method.upper()} {path}: {status}")
    return wrong


async def fuzz(http: httpx.AsyncClient, work: Path, st_args: list[str], ca: Path | None = None) -> int:
    """``st run`` over the served document with the page's routes added; st's exit status."""
    st = shutil.which("st")
    if st is None:
        raise SystemExit("schemathesis is not installed: pip install -e '.[dev]'")
    document = (await http.get("/openapi.json")).raise_for_status().json()
    document["paths"].update(UI_PATHS)
    schema = work / "openapi.json"
    schema.write_text(json.dumps(document))
    config = work / "schemathesis.toml"
    config.write_text(st_config())
    login: list[str] = []
    if ca is not None:
        wrong = await refused_without_credentials(str(http.base_url), ca, document)
        if wrong:
            print("answered without credentials:\n  " + "\n  ".join(wrong), file=sys.stderr)
            return 1
        login = ["--auth", ":".join(LOGIN), "--tls-verify", str(ca)]
    process = await asyncio.create_subprocess_exec(
        st, "--config-file", str(config), "run", str(schema), "--url", str(http.base_url),
        "--checks", "not_a_server_error", "--workers", "1", "--request-timeout", "60", *login, *st_args)
    return await process.wait()


async def serve_and_fuzz(east: KafkaCluster, west: KafkaCluster, work: Path, st_args: list[str],
                         secure: bool = False) -> int:
    worker = Worker(worker_config(east, west), commit_interval=0.5)
    await worker.start()
    settings, ca = secured(work) if secure else (None, None)
    server = RestServer(worker, "127.0.0.1", 0, settings=settings)
    await server.start()
    client: dict[str, Any] = {}
    if ca is not None:
        client = {"auth": LOGIN, "verify": ssl.create_default_context(cafile=str(ca))}
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60, **client) as http:
            await connectors(http, east, west)
            return await fuzz(http, work, st_args, ca)
    finally:
        await server.stop()
        await worker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--secured", action="store_true",
                        help="serve over HTTPS behind Connect's Basic authentication, and log in")
    parser.add_argument("st_args", nargs="*", help="passed to `st run` (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mm2py-fuzz-") as tmp:
        work = Path(tmp)
        east = KafkaCluster.create("east", work / "east")
        west = KafkaCluster.create("west", work / "west")
        try:
            start_all([east, west], timeout=120)
            seed(east)
            return asyncio.run(serve_and_fuzz(east, west, work, args.st_args, args.secured))
        finally:
            east.stop()
            west.stop()


if __name__ == "__main__":
    sys.exit(main())
