"""A running Strimzi MirrorMaker 2 moved to mm2py without a duplicate or a gap (issue 49).

Strimzi runs MM2's connectors on a Kafka Connect cluster; here the real one
(``tests.support.connect_worker``, Apache Kafka's ``ConnectDistributed`` with the Mirror connectors)
runs the source connector Strimzi would create for a ``KafkaMirrorMaker2`` resource: named
``<source>-><target>.MirrorSourceConnector``, its positions in the worker's offsets topic, which the
resource (v1beta2) names as its Connect cluster's ``offset.storage.topic``. The connector mirrors N
records and is stopped (Connect commits its positions); M more are produced; ``mm2py flow-offsets
import -c resource.yaml --flow source->target --execute`` reads the positions into the flow's, and
mm2py, run on the same resource, must mirror exactly the M records Connect did not: every record of
the source once, in order, in each partition of the target. The refusals (a missing topic, one
without a record of the connector, a malformed record) are checked to write nothing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml

from mm2py.cli import main
from mm2py.config.models import load_config
from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import (
    BackgroundWorker,
    Rec,
    by_partition,
    create_topic,
    make_records,
    produce_records,
    read_all,
    total,
    unique,
    wait_until,
)
from tests.support.connect_worker import ConnectWorker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

#: records per partition mirrored by Connect, then left for mm2py
CONNECT_N, MM2PY_M = 120, 80
PARTITIONS = 2
#: how long Connect's connector may take to start and mirror CONNECT_N records a partition (a fresh
#: connector's first topic discovery and its task's start included): measured 0.8 s here; bounded
#: generously, as a first connector start on a machine busy with other tests is slow
CONNECT_MIRRORED_S = 70
#: how long a stopped connector's last positions may take to reach the offsets topic (Connect
#: commits them as its task stops, or at its next 1 s flush): measured 1.4 s; bounded at twenty
#: times that for a loaded machine
COMMITTED_S = 30
#: how long mm2py may take to start and mirror the rest: measured 0.3 s; bounded as
#: test_strimzi_resource bounds a resource's flow (MIRRORED_S)
MM2PY_MIRRORED_S = 40


def resource(east: KafkaCluster, west: KafkaCluster, src: str, dst: str, topic: str,
             offsets_topic: str) -> dict[str, Any]:
    """A v1beta2 KafkaMirrorMaker2 mirroring ``topic`` from ``src`` (east) to ``dst`` (west), run on
    the Connect cluster whose offsets topic is ``offsets_topic``."""
    return {
        "apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaMirrorMaker2", "metadata": {"name": "move"},
        "spec": {
            "version": "4.1.0", "replicas": 1, "connectCluster": dst,
            "clusters": [
                {"alias": src, "bootstrapServers": east.bootstrap},
                {"alias": dst, "bootstrapServers": west.bootstrap,
                 "config": {"offset.storage.topic": offsets_topic,
                            "offset.storage.replication.factor": 1}},
            ],
            "mirrors": [{
                "sourceCluster": src, "targetCluster": dst, "topicsPattern": topic,
                "sourceConnector": {"tasksMax": 1, "config": {
                    "replication.factor": 1, "offset-syncs.topic.replication.factor": 1,
                    "sync.topic.acls.enabled": "false"}},
            }],
        },
    }


def source_connector(east: KafkaCluster, west: KafkaCluster, src: str, dst: str,
                     topic: str) -> dict[str, str]:
    """The MirrorSourceConnector config Strimzi derives from :func:`resource`'s mirror."""
    return {"connector.class": "org.apache.kafka.connect.mirror.MirrorSourceConnector",
            "source.cluster.alias": src, "target.cluster.alias": dst,
            "source.cluster.bootstrap.servers": east.bootstrap,
            "target.cluster.bootstrap.servers": west.bootstrap,
            "topics": topic, "tasks.max": "1", "replication.factor": "1",
            "offset-syncs.topic.replication.factor": "1", "sync.topic.acls.enabled": "false"}


def connect_positions(west: KafkaCluster, offsets_topic: str, connector: str, src: str,
                      topic: str) -> dict[int, int]:
    """The last offset Connect committed per partition of ``topic`` (read and parsed here, apart
    from the code under test)."""
    out: dict[int, int] = {}
    for r in read_all(west.bootstrap, offsets_topic):
        name, part = json.loads(r.key or b"null")
        if name == connector and part.get("cluster") == src and part.get("topic") == topic:
            if r.value is None:
                out.pop(int(part["partition"]), None)
            else:
                out[int(part["partition"])] = int(json.loads(r.value)["offset"])
    return out


def test_flow_offsets_import_moves_a_stopped_connect_mirror_to_mm2py_exactly(
    east: KafkaCluster, west: KafkaCluster, connect_worker: ConnectWorker, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def report(line: str) -> None:  # the measured times, shown with -s (capsys holds the CLI's output)
        with capsys.disabled():
            print(line)

    src, dst = unique("src"), unique("dst")
    topic = create_topic(east.bootstrap, unique("move"), partitions=PARTITIONS)
    remote = f"{src}.{topic}"
    name = f"{src}->{dst}.MirrorSourceConnector"
    path = tmp_path / "resource.yaml"
    path.write_text(yaml.safe_dump(resource(east, west, src, dst, topic, connect_worker.offsets_topic)))
    first = [r for p in range(PARTITIONS) for r in make_records(CONNECT_N, partition=p, tag=f"c{p}")]
    produce_records(east.bootstrap, topic, first)

    connect = httpx.Client(base_url=connect_worker.url, timeout=30)
    url = f"/connectors/{quote(name, safe='')}"
    r = connect.put(f"{url}/config", json=source_connector(east, west, src, dst, topic))
    assert r.status_code == 201, r.text
    took = wait_until(lambda: total(west.bootstrap, remote) == PARTITIONS * CONNECT_N, CONNECT_MIRRORED_S,
                      0.25, "Connect mirrored the first records")
    report(f"Connect mirrored {PARTITIONS * CONNECT_N} records in {took:.1f}s")
    assert connect.put(f"{url}/stop").status_code in (202, 204)  # 204 once the stop is done
    expected = dict.fromkeys(range(PARTITIONS), CONNECT_N - 1)
    offsets_topic = connect_worker.offsets_topic
    took = wait_until(lambda: connect_positions(west, offsets_topic, name, src, topic) == expected,
                      COMMITTED_S, 0.25, "Connect committed its last positions")
    report(f"Connect's positions committed {took:.1f}s after the stop")
    wait_until(lambda: connect.get(f"{url}/status").json()["connector"]["state"] == "STOPPED", COMMITTED_S,
               0.25, "the connector stopped")
    connect.close()
    rest = [r for p in range(PARTITIONS) for r in make_records(MM2PY_M, partition=p, tag=f"m{p}")]
    produce_records(east.bootstrap, topic, rest)
    assert total(west.bootstrap, remote) == PARTITIONS * CONNECT_N  # Connect mirrors no more

    def cli(*args: str) -> list[dict[str, Any]]:
        code = main(["flow-offsets", *args, "-c", str(path), "--flow", f"{src}->{dst}", "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        return [row for row in json.loads(out) if row["topic"] == topic]

    def positions(rows: list[dict[str, Any]]) -> dict[int, tuple[int | None, int | None]]:
        return {row["partition"]: (row["position"], row["target_offset"]) for row in rows}

    resumed = dict.fromkeys(range(PARTITIONS), (CONNECT_N, CONNECT_N))
    assert positions(cli("import")) == resumed  # the dry run shows what it would write ...
    assert cli("get") == []  # ... and writes nothing
    started = time.monotonic()
    assert positions(cli("import", "--execute")) == resumed
    report(f"import --execute took {time.monotonic() - started:.2f}s")
    assert positions(cli("get")) == resumed

    with BackgroundWorker(load_config(path), all_started=True):
        took = wait_until(lambda: total(west.bootstrap, remote) == PARTITIONS * (CONNECT_N + MM2PY_M),
                          MM2PY_MIRRORED_S, 0.25, "mm2py mirrored the rest")
    report(f"mm2py mirrored the remaining {PARTITIONS * MM2PY_M} records in {took:.1f}s")
    mirrored = read_all(west.bootstrap, remote)
    assert len(mirrored) == PARTITIONS * (CONNECT_N + MM2PY_M)
    source = read_all(east.bootstrap, topic)
    assert by_partition(mirrored) == by_partition(source) == by_partition(first + rest)


def test_import_refuses_a_missing_topic_a_topic_without_the_connector_and_a_malformed_record(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Each refusal is one line naming the cause, and writes nothing: the flow keeps no position."""
    src, dst = unique("src"), unique("dst")
    topic = create_topic(east.bootstrap, unique("move"))
    produce_records(east.bootstrap, topic, make_records(5))
    offsets_topic = unique("connect-offsets")
    path = tmp_path / "resource.yaml"
    path.write_text(yaml.safe_dump(resource(east, west, src, dst, topic, offsets_topic)))
    name = f"{src}->{dst}.MirrorSourceConnector"

    def cli(*args: str) -> tuple[int, str]:
        code = main(["flow-offsets", *args, "-c", str(path), "--flow", f"{src}->{dst}"])
        out, err = capsys.readouterr()
        return code, out + err

    def keyed(connector: str, **part: object) -> bytes:
        return json.dumps([connector, part]).encode()

    code, text = cli("import", "--execute")
    assert code == 2 and f"no topic {offsets_topic}" in text
    create_topic(west.bootstrap, offsets_topic)
    checkpoint = Rec(keyed(f"{src}->{dst}.MirrorCheckpointConnector", group="g", topic=topic, partition=0),
                     b'{"offset":3}', partition=0)
    produce_records(west.bootstrap, offsets_topic, [checkpoint])
    code, text = cli("import", "--execute")
    assert code == 2 and f"holds no record of connector '{name}'" in text
    good = Rec(keyed(name, cluster=src, topic=topic, partition=0), b'{"offset":2}', partition=0)
    bad = Rec(keyed(name, cluster=src, topic=topic, partition=0), b'{"offset":"two"}', partition=0)
    produce_records(west.bootstrap, offsets_topic, [good, bad])
    code, text = cli("import", "--execute")
    assert code == 2 and f"{offsets_topic} partition 0 offset 2" in text
    code, text = cli("get", "--json")
    assert code == 0 and json.loads(text) == []  # nothing was written by any of them
