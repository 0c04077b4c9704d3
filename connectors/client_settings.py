"""MM2 client overrides (``<alias>.consumer.*``, ``<alias>.producer.*``) for the raw client.

MirrorMaker 2 users tune the Java consumer and producer with properties such as
``east.consumer.max.partition.fetch.bytes``. The raw fetcher and producer honour the ones that mean
something for copying whole batches, under their Java names; the rest (serializers, batching,
``compression.type``: batches keep the source's codec) are reported once as ignored.
Invalid values are configuration errors naming the key. Connection security (``security.protocol``,
``ssl.*``, ``sasl.*``) is read by :mod:`mm2py.config.security` into each client's ``SecurityConfig``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mm2py.client.cluster import ClientConfig
from mm2py.client.connection import ConnectionConfig, SecurityConfig
from mm2py.client.fetcher import FetcherConfig
from mm2py.client.producer import MAX_WINDOW, ProducerConfig
from mm2py.config.errors import ConfigError
from mm2py.config.flat import is_connection_key
from mm2py.config.models import FlowConfig
from mm2py.config.security import cluster_security
from mm2py.protocol.api_fetch import READ_COMMITTED, READ_UNCOMMITTED

log = logging.getLogger(__name__)

def _is_connection_key(key: str) -> bool:
    """Keys used elsewhere: bootstrap servers, client id, the security settings (mm2py.config.security)."""
    return key == "client.id" or is_connection_key(key)


def _int(key: str, low: int = 0) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            n = int(str(value).strip())
        except ValueError:
            raise ConfigError(f"invalid value for {key!r}: expected an integer, got {value!r}", key) from None
        if n < low:
            raise ConfigError(f"invalid value for {key!r}: must be >= {low}, got {n}", key)
        return n

    return parse


def _choice(key: str, options: Mapping[str, Any]) -> Callable[[str], Any]:
    def parse(value: str) -> Any:
        v = str(value).strip().lower()
        if v not in options:
            raise ConfigError(
                f"invalid value for {key!r}: {value!r} (expected one of {', '.join(options)})", key
            )
        return options[v]

    return parse


CONSUMER_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "fetch.max.bytes": ("max_bytes", _int("fetch.max.bytes", 1)),
    "max.partition.fetch.bytes": ("partition_max_bytes", _int("max.partition.fetch.bytes", 1)),
    "fetch.max.wait.ms": ("max_wait_ms", _int("fetch.max.wait.ms")),
    "fetch.min.bytes": ("min_bytes", _int("fetch.min.bytes")),
    "isolation.level": ("isolation_level", _choice(
        "isolation.level", {"read_committed": READ_COMMITTED, "read_uncommitted": READ_UNCOMMITTED})),
    "auto.offset.reset": ("reset_to_earliest", _choice(
        "auto.offset.reset", {"earliest": True, "latest": False})),
    "request.timeout.ms": ("request_timeout_ms", _int("request.timeout.ms", 1)),
}

PRODUCER_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "acks": ("acks", _choice("acks", {"all": -1, "-1": -1, "1": 1})),
    "enable.idempotence": ("idempotent", _choice("enable.idempotence", {"true": True, "false": False})),
    "max.request.size": ("max_request_bytes", _int("max.request.size", 1)),
    "delivery.timeout.ms": ("delivery_timeout_ms", _int("delivery.timeout.ms", 1)),
    "request.timeout.ms": ("request_timeout_ms", _int("request.timeout.ms", 1)),
    "max.in.flight.requests.per.connection": (
        "max_in_flight", _int("max.in.flight.requests.per.connection", 1)),
}


@dataclass
class RawClientSettings:
    fetcher: FetcherConfig
    producer: ProducerConfig
    source_client: ClientConfig
    target_client: ClientConfig
    reset_to_earliest: bool = True
    ignored: list[str] = field(default_factory=list)


def _parse(
    props: Mapping[str, Any], table: Mapping[str, tuple[str, Callable[[str], Any]]], side: str,
    ignored: list[str],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in props.items():
        if key in table:
            name, parse = table[key]
            out[name] = parse(value)
        elif not _is_connection_key(key):
            ignored.append(f"{side}.{key}")
    return out


def raw_client_settings(
    flow: FlowConfig, *, fetch_max_bytes: int, partition_max_bytes: int = 1024 * 1024
) -> RawClientSettings:
    """Fetcher/producer/client settings for one flow's tasks from its resolved client overrides."""
    ignored: list[str] = []
    consumer = _parse(flow.client_config("source", "consumer"), CONSUMER_KEYS, "consumer", ignored)
    producer = _parse(flow.client_config("target", "producer"), PRODUCER_KEYS, "producer", ignored)
    fetcher = FetcherConfig(
        isolation_level=consumer.get("isolation_level", READ_COMMITTED),
        max_wait_ms=consumer.get("max_wait_ms", 500),
        min_bytes=consumer.get("min_bytes", 1),
        max_bytes=min(consumer.get("max_bytes", fetch_max_bytes), fetch_max_bytes),
        partition_max_bytes=consumer.get("partition_max_bytes", partition_max_bytes),
        sessions=flow.fetch_sessions_enabled,
    )
    delivery_ms = producer.get("delivery_timeout_ms", 120_000)
    request_ms = producer.get("request_timeout_ms", 30_000)
    producer_config = ProducerConfig(
        acks=producer.get("acks", -1),
        timeout_ms=request_ms,
        retry_timeout_s=delivery_ms / 1000,
        max_request_bytes=producer.get("max_request_bytes", ProducerConfig.max_request_bytes),
        idempotent=producer.get("idempotent", True),
        max_in_flight=min(flow.produce_inflight_batches, producer.get("max_in_flight", MAX_WINDOW)),
        connections_per_broker=flow.produce_connections_per_broker,
    )

    source_security = cluster_security(flow, "source", "consumer")
    target_security = cluster_security(flow, "target", "producer")
    ignored += [f"source.{k}" for k in source_security.ignored]
    ignored += [f"target.{k}" for k in target_security.ignored]

    def client(request_timeout_ms: int | None, security: SecurityConfig) -> ClientConfig:
        connection = ConnectionConfig(security=security)
        if request_timeout_ms is not None:
            connection = ConnectionConfig(request_timeout_s=request_timeout_ms / 1000, security=security)
        return ClientConfig(connection=connection)

    if ignored:
        log.info("%s: client settings without meaning for raw batch mirroring, ignored: %s",
                 flow.name, ", ".join(sorted(ignored)))
    return RawClientSettings(
        fetcher, producer_config,
        client(consumer.get("request_timeout_ms"), source_security.security_config()),
        client(producer.get("request_timeout_ms"), target_security.security_config()),
        consumer.get("reset_to_earliest", True), ignored,
    )
