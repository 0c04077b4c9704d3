"""What a worker's remote processes say of themselves: a Spark mirror host's own figures.

The driver's /metrics shows them per host (``mm2py_host_*``): the requests each host's raw
connections sent (a broker's Fetch rate per host, not only the sum the brokers see), its CPU and
resident memory, and the leases and partitions placed on it. The in-process worker has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["HostFigures"]


@dataclass(frozen=True)
class HostFigures:
    host: str  # the driver's name of it (host-0, host-1, ...)
    executor: str  # where it runs (host name and the executor's Python daemon)
    leases: int  # placed on it and not ended
    partitions: int  # of those leases
    #: (cluster name, API key) -> requests its raw connections sent since it started
    requests: Mapping[tuple[str, int], int] = field(default_factory=dict)
    cpu_seconds: float = 0.0
    rss_bytes: int = 0
