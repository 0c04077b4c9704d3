"""The requests this process's raw connections sent, per cluster and API.

Every :meth:`BrokerConnection.request <mm2py.client.connection.BrokerConnection.request>` counts
one (SASL exchanges and the first ApiVersions too, as they are sent through it). ``/metrics``
exports the counts as ``mm2py_requests_total{cluster, api}``: a broker's request rate from the
mirror's own side (the brokers' ``RequestsPerSec`` meters count every client), e.g. the Fetch
requests per second a source broker gets for a trickle over thousands of partitions.
"""

from __future__ import annotations

import threading

from mm2py.protocol.api import ApiKey

__all__ = ["REQUESTS", "RequestCounts", "api_name"]


class RequestCounts:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # several event loops (threads) may count at once
        self._counts: dict[tuple[str, int], int] = {}

    def add(self, cluster: str, api_key: int) -> None:
        key = (cluster, api_key)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def snapshot(self) -> dict[tuple[str, int], int]:
        """(cluster name, API key) -> requests sent so far."""
        with self._lock:
            return dict(self._counts)


def api_name(api_key: int) -> str:
    """Kafka's name of an API (``ListOffsets`` for 2), or its key as text when not one of ours."""
    try:
        return "".join(word.capitalize() for word in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


#: per cluster name (``SecurityConfig.name``; "" when unnamed) and API key
REQUESTS = RequestCounts()
