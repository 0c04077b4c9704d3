"""``accepts_connections``: whether a cluster's bootstrap addresses still refuse us, asked directly
(librdkafka holds back an identical refusal for 30 s, so its error callback goes quiet)."""

from __future__ import annotations

import socket

from mm2py.stores.reachability import accepts_connections


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
