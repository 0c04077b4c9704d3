"""KIP-405 tiered storage on a local test cluster: remote log storage backed by a directory.

Kafka ships a directory-backed ``RemoteStorageManager`` only in its test artifact
(``org.apache.kafka:kafka-storage:<version>:test``, class ``LocalTieredStorage``); the ``tiered``
Maven profile of ``pom.xml`` adds it to the brokers' class path. Remote log metadata is kept by the
broker's default, topic-based manager (``__remote_log_metadata``).

What makes a topic's early segments remote-only quickly is per topic (:func:`tiered_topic_config`):
tiny segments (``internal.segment.bytes``, a test-only topic config below the 1 MiB minimum of
``segment.bytes``) and a tiny local retention; the brokers check retention and copy segments often
(:func:`tiered_broker_config`). :func:`tiered_cluster` gives ``KafkaCluster.create`` both the
brokers' settings and the jars.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: the Maven profile (``pom.xml``) whose jars include LocalTieredStorage
TIERED_PROFILE = "tiered"
LOCAL_TIERED_STORAGE = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
#: ListOffsets timestamp spec of the earliest offset still in LOCAL storage (KIP-1005, ListOffsets v9+)
EARLIEST_LOCAL = -4


def tiered_broker_config(remote_dir: Path, replication_factor: int) -> dict[str, str]:
    """Broker settings: remote storage on, LocalTieredStorage under ``remote_dir`` (shared by all
    nodes, it plays the object store), short task intervals so segments move within seconds."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": LOCAL_TIERED_STORAGE,
        "rsm.config.dir": str(remote_dir),
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": str(replication_factor),
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500",
        "log.initial.task.delay.ms": "500",
    }


def tiered_topic_config(
    *, segment_bytes: int = 64 * 1024, local_retention_ms: int = 1
) -> dict[str, str]:
    """Topic settings: tiered, small segments, data kept remotely forever but locally only briefly
    (only segments already copied to remote storage are ever deleted locally)."""
    return {
        "remote.storage.enable": "true",
        "internal.segment.bytes": str(segment_bytes),
        "local.retention.ms": str(local_retention_ms),
        "retention.ms": "-1",
    }


def tiered_cluster(workdir: Path, nodes: int = 1) -> dict[str, Any]:
    """``KafkaCluster.create`` options of a cluster with remote storage on, backed by
    ``workdir/remote`` (``workdir``: the cluster's own); topics opt in with
    :func:`tiered_topic_config`."""
    return {"nodes": nodes, "jar_profile": TIERED_PROFILE,
            "broker_config": tiered_broker_config(workdir / "remote", min(3, nodes))}
