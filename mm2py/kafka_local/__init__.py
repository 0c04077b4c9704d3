"""Real Apache Kafka clusters on loopback for tests, the demo and the benchmarks (no Docker)."""

from .cluster import KafkaCluster, KafkaNode, running_cluster, start_all
from .jars import KAFKA_VERSION, HarnessError, resolve_jars
from .security import BrokerSecurity, TlsFiles
from .tiered import EARLIEST_LOCAL, tiered_topic_config

__all__ = [
    "EARLIEST_LOCAL",
    "KAFKA_VERSION",
    "BrokerSecurity",
    "HarnessError",
    "KafkaCluster",
    "KafkaNode",
    "TlsFiles",
    "resolve_jars",
    "running_cluster",
    "start_all",
    "tiered_topic_config",
]
