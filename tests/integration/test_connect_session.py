"""A Kafka Connect client's typical session against mm2py alone (in-process runtime, real brokers,
real HTTP): two MirrorSourceConnectors for one cluster pair with disjoint topics and different
``tasks.max``, both mirroring; an overlapping third refused; one changed with PATCH, stopped, its
offsets reset (KIP-875), resumed; a logger set to DEBUG over ``/admin/loggers`` changing what mm2py
logs; one deleted while the other keeps mirroring. Every record arrives once, in order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import (
    by_partition,
    create_topic,
    end_offsets,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    served_worker,
    total,
    unique,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)

SOURCE = "org.apache.kafka.connect.mirror.MirrorSourceConnector"


@contextmanager
def serving(config: Any, state_file: Path) -> Iterator[httpx.Client]:
    with served_worker(config, state_file=str(state_file)) as url, \
            httpx.Client(base_url=url, timeout=120) as http:
        yield http


def _error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error_code", "message"} and body["error_code"] == status, body
    return str(body["message"])


def _same(east: KafkaCluster, west: KafkaCluster, topic: str, remote: str,
          skipped: dict[int, range] | None = None) -> bool:
    """The remote topic holds every source record once, in order (but the ``skipped`` offsets)."""
    source = [r for r in read_all(east.bootstrap, topic)
              if skipped is None or r.offset not in skipped.get(r.partition or 0, range(0))]
    return by_partition(read_all(west.bootstrap, remote)) == by_partition(source)


@pytest.fixture
def engine_levels() -> Iterator[None]:
    names = ["mm2py.engine", *(n for n in logging.root.manager.loggerDict if n.startswith("mm2py.engine."))]
    before = {n: logging.getLogger(n).level for n in names}
    yield
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


def test_a_connect_clients_session_with_two_source_connectors_for_one_pair(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture,
    engine_levels: None,
) -> None:
    alias = unique("ses")
    fast, slow = f"mirror-{alias}-west-fast", f"mirror-{alias}-west-slow"
    orders = create_topic(east.bootstrap, unique("orders"), partitions=3)
    audit = create_topic(east.bootstrap, unique("audit"), partitions=2)
    remote_orders, remote_audit = f"{alias}.{orders}", f"{alias}.{audit}"
    produce_records(east.bootstrap, orders, make_records(300, tag="o1"), compression="lz4")
    produce_records(east.bootstrap, audit, make_records(120, tag="a1"))
    config = mirror_config({alias: east.bootstrap, "west": west.bootstrap}, {},
                           **{"refresh.topics.interval.seconds": 300})

    def connector(topics: str, tasks: int, **extra: str) -> dict[str, str]:
        return {"connector.class": SOURCE, "source.cluster.alias": alias, "target.cluster.alias": "west",
                "topics": topics, "tasks.max": str(tasks), **extra}

    with serving(config, tmp_path / "state.json") as http:
        assert http.put(f"/connectors/{fast}/config", json=connector(orders, 3)).status_code == 201
        r = http.post("/connectors", json={"name": slow, "config": connector(audit, 1)})
        assert r.status_code == 201 and r.headers["location"] == f"/connectors/{slow}", r.text
        message = _error(http.post("/connectors", json={"name": "both", "config": connector(
            f"{orders}|later.*", 1)}), 409)
        assert orders in message and fast in message, message
        assert sorted(http.get("/connectors").json()) == sorted([fast, slow])

        wait_until(lambda: _same(east, west, orders, remote_orders)
                   and _same(east, west, audit, remote_audit), 90, 0.5, "both connectors mirrored")
        tasks = {n: http.get(f"/connectors/{n}/status").json()["tasks"] for n in (fast, slow)}
        assert [len(tasks[fast]), len(tasks[slow])] == [3, 1], tasks
        offsets = http.get(f"/connectors/{slow}/offsets").json()["offsets"]
        assert {o["partition"]["topic"] for o in offsets} == {audit}  # its own positions only
        # the worker's /flows API sees the two flows by name, the pair shorthand is ambiguous now
        assert {f["name"] for f in http.get("/flows").json()["flows"]} == {fast, slow}
        assert http.get(f"/flows/{alias}/west").status_code == 409

        # PATCH (KIP-477): more tasks and a topic refresh every second, the flow's own settings only
        r = http.patch(f"/connectors/{slow}/config", json={"tasks.max": "2",
                                                           "refresh.topics.interval.seconds": "1"})
        assert r.status_code == 200 and r.json()["config"]["tasks.max"] == "2", r.text
        wait_until(lambda: len(http.get(f"/connectors/{slow}/status").json()["tasks"]) == 2, 60, 0.2,
                   "two tasks")
        assert len(http.get(f"/connectors/{fast}/status").json()["tasks"]) == 3

        # /admin/loggers: DEBUG shows the slow flow's refreshes (the scheduler's line per run)
        def refreshes_logged() -> int:
            return sum(1 for rec in caplog.records if rec.levelno == logging.DEBUG
                       and rec.getMessage().startswith(f"{slow}: refresh topics took"))

        assert http.put("/admin/loggers/mm2py.engine", json={"level": "INFO"}).status_code == 200
        before = refreshes_logged()
        assert http.put("/admin/loggers/mm2py.engine", json={"level": "DEBUG"}).status_code == 200
        wait_until(lambda: refreshes_logged() >= before + 2, 30, 0.2, "the refreshes logged at DEBUG")
        assert http.put("/admin/loggers/mm2py.engine", json={"level": "INFO"}).status_code == 200

        # stop, move its offsets past records produced while stopped (KIP-875), resume
        assert http.put(f"/connectors/{slow}/stop").status_code == 204
        assert http.get(f"/connectors/{slow}/status").json()["connector"]["state"] == "STOPPED"
        kept = end_offsets(east.bootstrap, audit)
        produce_records(east.bootstrap, audit, make_records(40, tag="skipped"))
        skipped_to = end_offsets(east.bootstrap, audit)
        body = {"offsets": [{"partition": {"cluster": alias, "topic": audit, "partition": p},
                             "offset": {"offset": end - 1}} for p, end in skipped_to.items()]}
        assert http.patch(f"/connectors/{fast}/offsets", json=body).status_code == 400  # fast runs
        assert http.patch(f"/connectors/{slow}/offsets", json=body).status_code == 200
        assert http.put(f"/connectors/{slow}/resume").status_code == 202
        produce_records(east.bootstrap, audit, make_records(60, tag="a2"))
        produce_records(east.bootstrap, orders, make_records(90, tag="o2"), compression="lz4")
        skipped = {p: range(kept[p], skipped_to[p]) for p in kept}
        wait_until(lambda: _same(east, west, audit, remote_audit, skipped)
                   and _same(east, west, orders, remote_orders), 90, 0.5, "both mirrored after the resume")

        # delete fast: slow keeps mirroring; nothing of fast's written after, nothing lost or twice
        assert http.delete(f"/connectors/{fast}").status_code == 204
        assert http.get("/connectors").json() == [slow]
        _error(http.get(f"/connectors/{fast}/status"), 404)
        mirrored_orders = total(west.bootstrap, remote_orders)
        produce_records(east.bootstrap, orders, make_records(50, tag="o3"))
        produce_records(east.bootstrap, audit, make_records(70, tag="a3"))
        wait_until(lambda: _same(east, west, audit, remote_audit, skipped), 60, 0.5, "slow goes on")
        assert total(west.bootstrap, remote_orders) == mirrored_orders
        assert http.get(f"/connectors/{slow}/status").json()["connector"]["state"] == "RUNNING"
