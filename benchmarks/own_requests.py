"""mm2py's own request counts, read from its /metrics: the process's and each Spark mirror host's.

Not a test. ``mm2py_requests_total{cluster, api}`` counts the requests the worker's own raw
connections sent; on Spark the mirror hosts' are ``mm2py_host_requests_total{host, executor,
cluster, api}`` (each host says its figures to the driver every second). :func:`own_requests`
reads both; the rates below are over two readings.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Key", "host_rates", "own_rates", "own_requests"]

#: (host, executor, cluster, API): host and executor "" for the worker's own process
Key = tuple[str, str, str, str]
FAMILIES = ("mm2py_requests_total", "mm2py_host_requests_total")


def own_requests(port: int | None) -> dict[Key, float]:
    """Every request counter of mm2py's /metrics ({}: none, or not reachable)."""
    if port is None:
        return {}
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return {}
    # only its lines: at 10,000 partitions the page has ~400,000, seconds of parsing
    text = "".join(line + "\n" for line in text.splitlines() if line.startswith(FAMILIES))
    return {(s.labels.get("host", ""), s.labels.get("executor", ""), s.labels["cluster"], s.labels["api"]):
            s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.name in FAMILIES}


def own_rates(before: dict[Key, float], after: dict[Key, float], span: float,
              source: str) -> dict[str, float]:
    """"source Fetch" -> requests/s of the whole peer (its process and its hosts), over ``span`` s;
    ``source``: the source cluster's alias. A host that started in between counts from 0."""
    out: dict[str, float] = {}
    for (host, executor, cluster, api), n in sorted(after.items()):
        key = f"{'source' if cluster == source else 'target'} {api}"
        out[key] = out.get(key, 0.0) + (n - before.get((host, executor, cluster, api), 0.0)) / span
    return out


def host_rates(before: dict[Key, float], after: dict[Key, float], span: float, source: str,
               api: str = "Fetch") -> dict[tuple[str, str], float]:
    """(host, executor) -> its ``api`` requests/s to the source over ``span`` s, for each mirror host
    in ``after`` (a host that started in between counts from 0)."""
    return {(host, executor): (n - before.get((host, executor, cluster, a), 0.0)) / span
            for (host, executor, cluster, a), n in sorted(after.items())
            if host and cluster == source and a == api}
