"""``mm2py flow-offsets import``'s parts that need no broker: where a Strimzi resource's Connect offsets
are, which source to read for a file of another kind, and the read of a Connect offsets topic (the
:class:`PositionStore` it reads with, given the topic, driven by a stand-in consumer)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.config.errors import ConfigError
from mm2py.config.models import load_config
from mm2py.config.strimzi import DEFAULT_OFFSETS_TOPIC, connect_offsets_of
from mm2py.operations.connect_import import (
    ConnectImportError,
    ImportSource,
    import_source,
    read_connect_positions,
)
from mm2py.protocol.connect_offsets import MalformedOffsetRecordError, Position, ProgressFold
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.stores import positions as positions_module
from mm2py.stores.positions import MalformedPositionError, PositionStore

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


Record = tuple[bytes | None, bytes | None]  # key, value


class _Admin:
    """What a store asks of its admin: the client settings."""

    def client_config(self, extra: Any = None) -> dict[str, Any]:
        return dict(extra or {})


class _Msg:
    def __init__(self, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 eof: bool = False) -> None:
        self._partition, self._offset, self._key, self._value, self._eof = partition, offset, key, value, eof

    def error(self) -> Any:
        if not self._eof:
            return None
        return type("Eof", (), {"code": staticmethod(lambda: -191)})()

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return 1, 1000 + self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value


class _Topics:
    """A stand-in for confluent-kafka's Consumer over one topic's partitions (None: no such topic)."""

    def __init__(self, topic: str, partitions: dict[int, list[Record]] | None) -> None:
        self.topic, self.partitions = topic, partitions
        self.assigned: list[tuple[int, int]] = []

    def __call__(self, conf: dict[str, Any]) -> _Topics:  # stands in for Consumer(conf)
        return self

    def list_topics(self, topic: str, timeout: float) -> Any:
        topics: dict[str, Any] = {}
        if topic == self.topic and self.partitions is not None:
            topics[topic] = type("Md", (), {"error": None, "partitions": dict.fromkeys(self.partitions)})()
        return type("Meta", (), {"topics": topics})()

    def offsets_for_times(self, tps: list[Any], timeout: float) -> list[Any]:
        """ListOffsets: -2 asks a partition's log start (0 here), -1 its end."""
        assert self.partitions is not None
        parts = self.partitions
        return [CKTopicPartition(tp.topic, tp.partition, 0 if tp.offset == -2 else len(parts[tp.partition]))
                for tp in tps]

    def assign(self, tps: list[Any]) -> None:
        self.assigned = [(tp.partition, tp.offset) for tp in tps]
        self._msgs = self._messages()

    def _messages(self) -> Iterator[_Msg]:
        assert self.partitions is not None
        for part, start in self.assigned:
            for offset, (k, v) in enumerate(self.partitions[part][start:], start):
                yield _Msg(part, offset, k, v)
            yield _Msg(part, len(self.partitions[part]), None, None, eof=True)

    def poll(self, timeout: float) -> _Msg | None:
        return next(self._msgs, None)

    def close(self) -> None:
        pass


def topic(monkeypatch: pytest.MonkeyPatch, partitions: dict[int, list[Record]] | None,
          name: str = "offsets") -> None:
    """The stores' consumers read ``partitions`` as topic ``name`` (None: no such topic)."""
    monkeypatch.setattr(positions_module, "Consumer", _Topics(name, partitions))


ADMIN = cast(ClusterAdmin, _Admin())


def read() -> dict[TopicPartition, Position]:
    """The positions an import of CONNECTOR's from topic "offsets" reads for cluster east."""
    return read_connect_positions(ADMIN, ImportSource("offsets", CONNECTOR), "east", 5.0)


def test_the_fold_keeps_the_last_record_per_key_and_skips_other_connectors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records: list[Record] = [
        (key(CONNECTOR, cluster="east", topic="t", partition=0), offset(4)),
        # the checkpoint connector's keys: another connector's, another shape
        (key("east->west.MirrorCheckpointConnector", group="g", topic="t", partition=0), offset(99)),
        (key(CONNECTOR, cluster="east", topic="t", partition=1), offset(7)),
        (key(CONNECTOR, cluster="east", topic="t", partition=0), offset(9)),
        (key(CONNECTOR, cluster="south", topic="t", partition=2), offset(3)),  # another source cluster
        (key(CONNECTOR, cluster="east", topic="t", partition=1), None),  # forgotten
        (key("other-connector", table="x"), b"{}"),  # a connector of another kind
    ]
    fold = ProgressFold("east", CONNECTOR)
    for i, (k, v) in enumerate(records):
        fold.add(0, 1000 + i, k, v)
    assert fold.positions() == {TopicPartition("t", 0): Position(10)}
    assert fold.records == 4  # the connector's records for the cluster, the tombstone too
    topic(monkeypatch, {0: records})
    assert read() == {TopicPartition("t", 0): Position(10)}


def test_a_malformed_record_of_the_connector_names_where_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    good = (key(CONNECTOR, cluster="east", topic="t", partition=0), offset(1))
    bad = (key(CONNECTOR, cluster="east", topic="t", partition=0), b"{\"no-offset\":1}")
    topic(monkeypatch, {0: [good], 3: [good] * 17 + [bad]})
    with pytest.raises(ConnectImportError, match=r"offsets partition 3 offset 17: .*; nothing imported"):
        read()
    topic(monkeypatch, {0: [good, good, (b"not json", b"{}")]})
    with pytest.raises(ConnectImportError, match="partition 0 offset 2"):
        read()


def test_no_record_of_the_connector_is_an_error_as_is_all_forgotten_and_no_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic(monkeypatch, None)
    with pytest.raises(ConnectImportError, match="no topic offsets on the target cluster"):
        read()
    other = (key("MirrorSourceConnector", cluster="east", topic="t", partition=0), offset(1))
    topic(monkeypatch, {0: [other]})
    with pytest.raises(ConnectImportError, match="no record of connector"):
        read()
    topic(monkeypatch, {0: [other, (key(CONNECTOR, cluster="east", topic="t", partition=0), offset(1)),
                            (key(CONNECTOR, cluster="east", topic="t", partition=0), None)]})
    with pytest.raises(ConnectImportError, match="forgotten"):
        read()


def test_a_position_store_reads_the_topic_it_is_given_and_skips_a_malformed_record_unless_strict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    k0 = key("MirrorSourceConnector", cluster="east", topic="t", partition=0)
    records: list[Record] = [(k0, offset(4)), (k0, b"not json"), (k0, offset(6))]
    topic(monkeypatch, {0: records}, name="mm2-offsets.east.internal")
    store = PositionStore(ADMIN, "east")  # the progress topic, by default
    assert store.topic == "mm2-offsets.east.internal"
    assert store.load() == {TopicPartition("t", 0): Position(7)}  # the malformed record logged, skipped
    assert store.found and store.records_folded == 2
    elsewhere = PositionStore(ADMIN, "east", topic="elsewhere")
    assert elsewhere.load() == {} and not elsewhere.found  # no such topic: no position
    topic(monkeypatch, {0: records}, name="elsewhere")
    strict = PositionStore(ADMIN, "east", topic="elsewhere", strict=True)
    with pytest.raises(MalformedPositionError, match="elsewhere partition 0 offset 1") as caught:
        strict.load()
    assert (caught.value.partition, caught.value.offset) == (0, 1)
    assert isinstance(caught.value, MalformedOffsetRecordError)
    topic(monkeypatch, {0: [records[0], records[2]]}, name="elsewhere")
    assert strict.load() == {TopicPartition("t", 0): Position(7)}  # read again from the start
    assert strict.records_folded == 2
