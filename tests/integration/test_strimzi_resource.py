"""A Strimzi ``KafkaMirrorMaker2`` resource run as it is (issue 49 item 1), on real brokers: the file
``load_config`` reads mirrors the mirror's topics into the target, every record once and in order,
with the resource's pattern, exclusion and replication factors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mm2py.config.models import load_config
from mm2py.kafka_local import KafkaCluster
from tests.support.brokers import (
    BackgroundWorker,
    by_partition,
    create_topic,
    make_records,
    produce_records,
    read_all,
    topic_names,
    total,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration


def test_a_plain_resource_mirrors_its_topics(east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> None:
    prefix = unique("strimzi")
    kept = create_topic(east.bootstrap, f"{prefix}-orders", partitions=2)
    left = create_topic(east.bootstrap, f"{prefix}-scratch")
    records = [*make_records(300, partition=0, tag="a"), *make_records(200, partition=1, tag="b")]
    produce_records(east.bootstrap, kept, records)
    produce_records(east.bootstrap, left, make_records(10))
    single_node = {"replication.factor": 1, "offset-syncs.topic.replication.factor": 1}
    resource = {
        "apiVersion": "kafka.strimzi.io/v1", "kind": "KafkaMirrorMaker2", "metadata": {"name": "it"},
        "spec": {
            "version": "4.1.0", "replicas": 1,
            "target": {"alias": "west", "bootstrapServers": west.bootstrap, "groupId": "it",
                       "configStorageTopic": "it-configs", "offsetStorageTopic": "it-offsets",
                       "statusStorageTopic": "it-status",
                       "config": {"offset.storage.replication.factor": 1}},
            "mirrors": [{
                "source": {"alias": "east", "bootstrapServers": east.bootstrap},
                "sourceConnector": {"tasksMax": 2,
                                    "config": {**single_node, "sync.topic.acls.enabled": False}},
                "checkpointConnector": {"config": {"checkpoints.topic.replication.factor": 1}},
                "topicsPattern": f"{prefix}-.*", "topicsExcludePattern": f"{prefix}-scratch",
            }],
        },
    }
    path = tmp_path / "mirror.yaml"
    path.write_text(yaml.safe_dump(resource))
    config = load_config(path)
    assert [f.name for f in config.enabled_flows()] == ["east->west"]
    with BackgroundWorker(config):
        wait_until(lambda: total(west.bootstrap, f"east.{kept}") == 500, 120, 0.5, "mirrored")
    mirrored = read_all(west.bootstrap, f"east.{kept}", expect=500)
    assert by_partition(mirrored) == by_partition(records)
    assert f"east.{left}" not in topic_names(west.bootstrap)
