"""``mm2py flow-offsets import``'s pure parts: where a Strimzi resource's Connect offsets are, which
source to read for a file of another kind, and the fold of a Connect offsets topic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mm2py.config.errors import ConfigError
from mm2py.config.models import load_config
from mm2py.config.strimzi import DEFAULT_OFFSETS_TOPIC, connect_offsets_of
from mm2py.operations.connect_import import ConnectFold, ConnectImportError, ImportSource, import_source
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.types import TopicPartition

CONNECTOR = "east->west.MirrorSourceConnector"


def v1beta2(config: dict[str, Any] | None = None) -> dict[str, Any]:
    west: dict[str, Any] = {"alias": "west", "bootstrapServers": "west:9092"}
    if config is not None:
        west["config"] = config
    return {"apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaMirrorMaker2", "metadata": {"name": "m"},
            "spec": {"connectCluster": "west",
                     "clusters": [{"alias": "east", "bootstrapServers": "east:9092"}, west],
                     "mirrors": [{"sourceCluster": "east", "targetCluster": "west", "sourceConnector": {}}]}}


def v1(offsets_topic: str) -> dict[str, Any]:
    return {"apiVersion": "kafka.strimzi.io/v1", "kind": "KafkaMirrorMaker2", "metadata": {"name": "m"},
            "spec": {"target": {"alias": "west", "bootstrapServers": "west:9092", "groupId": "g",
                                "configStorageTopic": "c", "offsetStorageTopic": offsets_topic,
                                "statusStorageTopic": "s"},
                     "mirrors": [{"source": {"alias": "east", "bootstrapServers": "east:9092"},
                                  "sourceConnector": {}}]}}


def test_v1beta2_reads_the_connect_clusters_offset_storage_topic() -> None:
    doc = v1beta2({"offset.storage.topic": "my-offsets"})
    assert connect_offsets_of(doc, "east", "west") == ("my-offsets", CONNECTOR)


def test_v1beta2_without_one_gets_strimzis_default() -> None:
    assert connect_offsets_of(v1beta2(), "east", "west") == (DEFAULT_OFFSETS_TOPIC, CONNECTOR)
    assert DEFAULT_OFFSETS_TOPIC == "mirrormaker2-cluster-offsets"


def test_v1beta2_reads_the_connect_cluster_not_another() -> None:
    doc = v1beta2()
    doc["spec"]["clusters"][0]["config"] = {"offset.storage.topic": "not-the-connect-clusters"}
    assert connect_offsets_of(doc, "east", "west")[0] == DEFAULT_OFFSETS_TOPIC


def test_v1_reads_the_targets_offset_storage_topic() -> None:
    assert connect_offsets_of(v1("it-offsets"), "east", "west") == ("it-offsets", CONNECTOR)


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_resource_gives_the_defaults_and_options_override_them(tmp_path: Path) -> None:
    path = write(tmp_path / "m.yaml", v1beta2({"offset.storage.topic": "my-offsets"}))
    flow = load_config(path).flow("east", "west")
    assert import_source(path, flow, None, None) == ImportSource("my-offsets", CONNECTOR)
    assert import_source(path, flow, "other", "mine") == ImportSource("other", "mine")


def test_another_file_must_name_topic_and_connector(tmp_path: Path) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text("clusters=east,west\neast.bootstrap.servers=e:1\nwest.bootstrap.servers=w:1\n"
                    "east->west.enabled=true\n")
    flow = load_config(path).flow("east", "west")
    with pytest.raises(ConfigError, match="--from-topic"):
        import_source(path, flow, "connect-offsets", None)
    assert import_source(path, flow, "connect-offsets", "c1") == ImportSource("connect-offsets", "c1")
    with pytest.raises(ConfigError, match="nothing to import"):
        import_source(path, flow, "mm2-offsets.east.internal", "MirrorSourceConnector")


def key(connector: str, **part: Any) -> bytes:
    return json.dumps([connector, part]).encode()


def offset(o: int) -> bytes:
    return json.dumps({"offset": o}).encode()


def test_the_fold_keeps_the_last_record_per_key_and_skips_other_connectors() -> None:
    fold = ConnectFold("offsets", "east", CONNECTOR)
    records = [
        (key(CONNECTOR, cluster="east", topic="t", partition=0), offset(4)),
        # the checkpoint connector's keys: another connector's, another shape
        (key("east->west.MirrorCheckpointConnector", group="g", topic="t", partition=0), offset(99)),
        (key(CONNECTOR, cluster="east", topic="t", partition=1), offset(7)),
        (key(CONNECTOR, cluster="east", topic="t", partition=0), offset(9)),
        (key(CONNECTOR, cluster="south", topic="t", partition=2), offset(3)),  # another source cluster
        (key(CONNECTOR, cluster="east", topic="t", partition=1), None),  # forgotten
        (key("other-connector", table="x"), b"{}"),  # a connector of another kind
    ]
    for i, (k, v) in enumerate(records):
        fold.add(0, i, 1000 + i, k, v)
    assert fold.positions() == {TopicPartition("t", 0): Position(10)}
    assert fold.records == 4


def test_a_malformed_record_of_the_connector_names_where_it_is() -> None:
    fold = ConnectFold("offsets", "east", CONNECTOR)
    with pytest.raises(ConnectImportError, match="offsets partition 3 offset 17"):
        fold.add(3, 17, 0, key(CONNECTOR, cluster="east", topic="t", partition=0), b"{\"no-offset\":1}")
    with pytest.raises(ConnectImportError, match="partition 0 offset 2"):
        fold.add(0, 2, 0, b"not json", b"{}")


def test_no_record_of_the_connector_is_an_error_as_is_all_forgotten() -> None:
    fold = ConnectFold("offsets", "east", CONNECTOR)
    fold.add(0, 0, 0, key("MirrorSourceConnector", cluster="east", topic="t", partition=0), offset(1))
    with pytest.raises(ConnectImportError, match="no record of connector"):
        fold.positions()
    fold.add(0, 1, 1, key(CONNECTOR, cluster="east", topic="t", partition=0), offset(1))
    fold.add(0, 2, 2, key(CONNECTOR, cluster="east", topic="t", partition=0), None)
    with pytest.raises(ConnectImportError, match="forgotten"):
        fold.positions()
