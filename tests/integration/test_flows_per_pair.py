"""Several flows of one cluster pair over the ``/flows`` API (in-process runtime, real brokers, real
HTTP): each flow keyed by its own name, with its own tasks and positions; an overlapping one
refused; a restart from the state file brings each flow back with its positions; deleting one
leaves the other alone. Every record arrives once, in order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import (
    by_partition,
    create_topic,
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


@contextmanager
def serving(config: Any, state_file: Path) -> Iterator[httpx.Client]:
    with served_worker(config, state_file=str(state_file)) as url, \
            httpx.Client(base_url=url, timeout=120) as http:
        yield http


def _exact(east: KafkaCluster, west: KafkaCluster, topic: str, remote: str) -> bool:
    """Every source record once on the target, in order."""
    return by_partition(read_all(west.bootstrap, remote)) == by_partition(read_all(east.bootstrap, topic))


def test_two_flows_of_one_pair_mirror_exactly_keep_their_positions_across_a_restart_and_part(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path
) -> None:
    alias = unique("pp")
    fast, slow = "mirror-east-west-fast", "slow flow"  # a space: URL-escaped
    orders = create_topic(east.bootstrap, unique("orders"), partitions=4)
    audit = create_topic(east.bootstrap, unique("audit"), partitions=2)
    remote = {orders: f"{alias}.{orders}", audit: f"{alias}.{audit}"}
    produce_records(east.bootstrap, orders, make_records(400, tag="o1"), compression="lz4")
    produce_records(east.bootstrap, audit, make_records(150, tag="a1"))
    config = mirror_config({alias: east.bootstrap, "west": west.bootstrap}, {},
                           **{"refresh.topics.interval.seconds": 300, "emit.checkpoints.enabled": False})
    state = tmp_path / "state.json"
    new = {"source": alias, "target": "west"}

    def both() -> bool:
        return _exact(east, west, orders, remote[orders]) and _exact(east, west, audit, remote[audit])

    with serving(config, state) as http:
        r = http.post("/flows", json={**new, "name": fast, "topics": [orders], "settings": {"tasks.max": 3}})
        assert r.status_code == 201 and r.json()["name"] == fast, r.text
        r = http.post("/flows", json={**new, "name": slow, "topics": [audit]})
        assert r.status_code == 201 and (r.json()["source"], r.json()["target"]) == (alias, "west"), r.text
        r = http.post("/flows", json={**new, "name": "third", "topics": f"{orders},{audit}"})
        assert r.status_code == 409 and "'third'" in r.json()["error"], r.text
        assert f"topic '{audit}'" in r.json()["error"] and f"flow '{slow}'" in r.json()["error"]
        r = http.post("/flows", json={**new, "name": "x->y"})
        assert r.status_code == 400 and r.json()["key"] == "name", r.text
        assert http.post("/flows", json={**new, "name": fast, "topics": ["other"]}).status_code == 409

        wait_until(both, 90, 0.5, "both flows mirrored")
        by_name = {f["name"]: f for f in http.get("/flows").json()["flows"]}
        assert set(by_name) == {fast, slow}
        assert [len(by_name[fast]["tasks"]), len(by_name[slow]["tasks"])] == [3, 1]
        assert set(by_name[fast]["topics"]) == {orders} and set(by_name[slow]["topics"]) == {audit}
        assert http.get(f"/flows/{quote(slow)}/config").json()["topics"] == [audit]
        # the pair shorthand names both flows when it is ambiguous
        r = http.get(f"/flows/{alias}/west")
        assert r.status_code == 409 and fast in r.json()["error"] and slow in r.json()["error"]
        # positions per flow, each its own partitions
        offsets = {n: http.get(f"/flows/{quote(n)}/offsets").json() for n in (fast, slow)}
        assert {o["topic"] for o in offsets[fast]["offsets"]} == {orders} and offsets[fast]["flow"] == fast
        assert {o["topic"] for o in offsets[slow]["offsets"]} == {audit}
        wait_until(lambda: sum(o["position"] for o in http.get(f"/flows/{quote(fast)}/offsets").json()[
            "offsets"]) == 400, 30, 0.2, "fast's positions committed")  # a commit may follow the write
        metrics = http.get("/metrics").text
        assert f'mm2py_task_records_total{{flow="{fast}",task="2"}}' in metrics
        assert f'mm2py_task_records_total{{flow="{slow}",task="0"}}' in metrics

    sections = json.loads(state.read_text())["sections"]
    assert sections["flows"][fast]["settings"] == {"topics": orders, "tasks.max": "3"}
    produce_records(east.bootstrap, orders, make_records(120, tag="o2"), compression="lz4")
    produce_records(east.bootstrap, audit, make_records(80, tag="a2"))

    with serving(config, state) as http:
        by_name = {f["name"]: f for f in http.get("/flows").json()["flows"]}
        assert set(by_name) == {fast, slow} and len(by_name[fast]["tasks"]) == 3
        wait_until(both, 90, 0.5, "both flows resumed from their own positions")
        assert http.delete(f"/flows/{quote(fast)}").status_code == 204
        assert http.get(f"/flows/{alias}/west").json()["name"] == slow  # the pair's only flow now
        before = total(west.bootstrap, remote[orders])
        produce_records(east.bootstrap, orders, make_records(30, tag="o3"))
        produce_records(east.bootstrap, audit, make_records(60, tag="a3"))
        wait_until(lambda: _exact(east, west, audit, remote[audit]), 60, 0.5, "the other flow goes on")
        assert total(west.bootstrap, remote[orders]) == before
    assert set(json.loads(state.read_text())["sections"]["flows"]) == {slow}
