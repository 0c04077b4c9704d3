"""Real Apache Kafka clusters on loopback for tests, the demo and the benchmarks (no Docker)."""

from .cluster import KafkaCluster, KafkaNode, running_cluster, start_all
from .jars import KAFKA_VERSION, HarnessError, resolve_jars
from .security import BrokerSecurity, TlsFiles

__all__ = [
    "KAFKA_VERSION",
    "BrokerSecurity",
    "HarnessError",
    "KafkaCluster",
    "KafkaNode",
    "TlsFiles",
    "resolve_jars",
    "running_cluster",
    "start_all",
]
