"""``accepts_connections``: whether a cluster's bootstrap addresses still refuse us, asked directly
(librdkafka holds back an identical refusal for 30 s, so its error callback goes quiet)."""

from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka import KafkaError

from mm2py.errors import ClusterUnreachableError
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.rdkafka.reachability import accepts_connections


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once closed


def test_a_listening_address_among_refusing_ones_accepts() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert accepts_connections(f"127.0.0.1:{_closed_port()},PLAINTEXT://127.0.0.1:{port}")


def test_only_refusing_addresses_do_not_accept() -> None:
    assert not accepts_connections(f"127.0.0.1:{_closed_port()}, 127.0.0.1:{_closed_port()}")


def test_an_address_that_cannot_be_read_counts_as_one_that_may_accept() -> None:
    assert accepts_connections("no-port-here")


def test_a_refusing_cluster_is_unreachable_though_librdkafka_reports_each_refusal_once() -> None:
    """librdkafka reports an identical refusal once and holds the next back for 30 s: the admin
    client, hearing each kind of refusal once, still names the cluster unreachable within seconds
    (asking the bootstrap address itself), not after its 30 s call time-out."""
    admin = ClusterAdmin("east", f"127.0.0.1:{_closed_port()}", timeout=30, unreachable_timeout=2.5)
    heard = admin.health.on_error
    reported: set[int] = set()

    def once_each(err: KafkaError) -> None:
        if err.code() not in reported:
            reported.add(err.code())
            heard(err)

    admin.health.on_error = once_each  # type: ignore[method-assign]
    started = time.monotonic()
    with pytest.raises(ClusterUnreachableError) as err:
        admin.list_topics()
    assert time.monotonic() - started < 15, err.value
    assert "every broker refused connections" in str(err.value)
