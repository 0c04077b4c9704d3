"""MM2 consumer/producer overrides reach the raw fetcher and producer; bad values name the key."""

from __future__ import annotations

import pytest

from mm2py.client.producer.requests import MAX_CONNECTIONS_PER_BROKER, MAX_WINDOW
from mm2py.config.errors import ConfigError
from mm2py.config.models import MirrorMakerConfig
from mm2py.connectors.client_settings import raw_client_settings
from mm2py.protocol.api_fetch import READ_UNCOMMITTED


def _flow(**extra: object):  # type: ignore[no-untyped-def]
    doc: dict[str, object] = {
        "clusters": {"east": "127.0.0.1:1", "west": "127.0.0.1:2"},
        "flows": {"east->west": {}},
    }
    doc.update(extra)
    return MirrorMakerConfig.from_mapping(doc).enabled_flows()[0]


def test_java_client_names_are_honoured() -> None:
    flow = _flow(**{
        "east.consumer.max.partition.fetch.bytes": "262144",
        "east.consumer.isolation.level": "read_uncommitted",
        "east.consumer.auto.offset.reset": "latest",
        "east.consumer.fetch.max.wait.ms": "50",
        "west.producer.enable.idempotence": "false",
        "west.producer.delivery.timeout.ms": "9000",
        "west.producer.request.timeout.ms": "4000",
        "west.producer.max.in.flight.requests.per.connection": "1",
        "west.producer.linger.ms": "5",
        "west.producer.compression.type": "gzip",
    })
    s = raw_client_settings(flow, fetch_max_bytes=8 << 20)
    assert s.fetcher.partition_max_bytes == 262144
    assert s.fetcher.isolation_level == READ_UNCOMMITTED
    assert s.fetcher.max_wait_ms == 50
    assert s.reset_to_earliest is False
    assert s.producer.idempotent is False and s.producer.max_in_flight == 1
    assert s.producer.retry_timeout_s == 9.0 and s.producer.timeout_ms == 4000
    assert s.target_client.connection.request_timeout_s == 4.0
    assert sorted(s.ignored) == ["producer.compression.type", "producer.linger.ms"]


def test_defaults_are_the_mirror_defaults() -> None:
    s = raw_client_settings(_flow(), fetch_max_bytes=8 << 20)
    assert s.fetcher.max_bytes == 8 << 20 and s.producer.idempotent and s.producer.acks == -1
    assert s.reset_to_earliest and not s.ignored and s.producer.max_in_flight == 16
    assert s.producer.connections_per_broker == 2


def test_the_window_is_a_flow_setting_and_the_java_key_caps_it() -> None:
    s = raw_client_settings(_flow(**{"mm2py.produce.inflight.batches": str(MAX_WINDOW)}),
                            fetch_max_bytes=8 << 20)
    assert s.producer.max_in_flight == MAX_WINDOW == 32
    s = raw_client_settings(_flow(**{"west.producer.max.in.flight.requests.per.connection": "5"}),
                            fetch_max_bytes=8 << 20)
    assert s.producer.max_in_flight == 5
    with pytest.raises(ConfigError, match=r"mm2py\.produce\.inflight\.batches"):
        _flow(**{"mm2py.produce.inflight.batches": str(MAX_WINDOW + 1)})


def test_connections_per_broker_is_a_flow_setting_with_bounds() -> None:
    s = raw_client_settings(_flow(**{"east->west.mm2py.produce.connections.per.broker": "1"}),
                            fetch_max_bytes=8 << 20)
    assert s.producer.connections_per_broker == 1
    key = "mm2py.produce.connections.per.broker"
    most = raw_client_settings(_flow(**{key: str(MAX_CONNECTIONS_PER_BROKER)}), fetch_max_bytes=8 << 20)
    assert most.producer.connections_per_broker == MAX_CONNECTIONS_PER_BROKER == 8
    for bad in ("0", str(MAX_CONNECTIONS_PER_BROKER + 1), "two"):
        with pytest.raises(ConfigError, match=r"mm2py\.produce\.connections\.per\.broker"):
            _flow(**{"mm2py.produce.connections.per.broker": bad})


@pytest.mark.parametrize("key,value", [
    ("east.consumer.max.partition.fetch.bytes", "lots"),
    ("east.consumer.isolation.level", "sometimes"),
    ("west.producer.acks", "0"),
])
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        raw_client_settings(_flow(**{key: value}), fetch_max_bytes=1 << 20)
    assert key.split(".", 2)[2] in str(err.value)
