"""The ``/metrics`` page: the registry's families, then the per-partition time figures as text.

At thousands of partitions the per-partition histograms (replication latency and record age, 18
``le`` buckets each) are most of the page. Rendered through ``prometheus_client``'s generic path (a
sample object per line, its labels sorted and escaped), a scrape held the GIL long enough to stall
every partition's event loop. Here those families are written straight from the histograms' counts
(label text built once per partition), with the same names, labels and values (a unit test parses
both and compares). The figures, before and after: benchmarks/README.md, "One request per fetch, a
scrape that does not stall".

:func:`metrics_page` is the page both servers answer with (``mm2py run --metrics-port`` through
:func:`serve_metrics`, and the REST API's ``GET /metrics``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import accumulate
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.utils import floatToGoString

from mm2py.engine.latency import LATENCY_BUCKETS, Histogram, PartitionTimes
from mm2py.protocol.types import TopicPartition
from mm2py.runtime.flows import FlowRunnerBase

__all__ = ["HISTOGRAMS", "LAG", "PartitionTimesPage", "metrics_page", "partition_times", "serve_metrics"]

_BOUNDS = [*map(str, LATENCY_BUCKETS), "+Inf"]
#: (name, help, PartitionTimes field) of the per-partition histograms; the lag gauge's name, help
HISTOGRAMS = (
    ("mm2py_replication_latency_seconds",
     "Record timestamp to the target's acknowledgement, per batch (its newest record)", "replication"),
    ("mm2py_record_age_seconds", "Record timestamp to its fetch from the source, per batch", "age"),
)
LAG = ("mm2py_partition_lag_seconds",
        "Age of the newest record fetched while the partition had more to fetch (0 when caught up)")


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def partition_times(
    flows: Mapping[str, FlowRunnerBase[Any]],
) -> Iterator[tuple[str, TopicPartition, PartitionTimes]]:
    """Each flow's partitions' figures, in flow then partition order (a partition that moved
    between tasks has figures in both: merged)."""
    for flow_name, flow in flows.items():
        merged: dict[TopicPartition, PartitionTimes] = {}
        for runner in flow.tasks.values():
            for tp, times in runner.metrics.times.items():
                merged.setdefault(tp, PartitionTimes()).add(times)
        for tp, times in sorted(merged.items()):
            yield flow_name, tp, times


def _histogram_lines(name: str, labels: str, h: Histogram, out: list[str]) -> None:
    """A histogram's lines; counts are whole numbers, written as the float text Prometheus reads
    (``12.0``, as ``floatToGoString`` writes it below 1e16)."""
    bucket = f'{name}_bucket{{{labels},le="'
    counts = list(accumulate(h.counts))
    out.extend(f'{bucket}{bound}"}} {n}.0\n' for bound, n in zip(_BOUNDS, counts, strict=True))
    out.append(f"{name}_count{{{labels}}} {counts[-1]}.0\n")
    out.append(f"{name}_sum{{{labels}}} {floatToGoString(h.total)}\n")


class PartitionTimesPage:
    """Replication latency, record age (histograms) and lag in time, per partition, as
    exposition text (what :class:`~mm2py.runtime.metrics.WorkerCollector` yields with
    ``partition_times=True``)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def text(self) -> str:
        rows = [(f'flow="{_escape(f)}",partition="{tp.partition}",topic="{_escape(tp.topic)}"', times)
                for f, tp, times in partition_times(self.worker.flows)]
        out: list[str] = []
        for name, help_, field in HISTOGRAMS:
            out.append(f"# HELP {name} {help_}\n# TYPE {name} histogram\n")
            for labels, times in rows:
                _histogram_lines(name, labels, getattr(times, field), out)
        name, help_ = LAG
        out.append(f"# HELP {name} {help_}\n# TYPE {name} gauge\n")
        out.extend(f"{name}{{{labels}}} {floatToGoString(times.lag_seconds)}\n" for labels, times in rows)
        return "".join(out)


def metrics_page(registry: CollectorRegistry, times: PartitionTimesPage | None) -> bytes:
    """The registry's exposition text, then the per-partition time families."""
    page = generate_latest(registry)
    return page + times.text().encode() if times is not None else page


def serve_metrics(host: str, port: int, registry: CollectorRegistry, times: PartitionTimesPage) -> None:
    """Answer every GET with :func:`metrics_page` on ``host:port`` from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = metrics_page(registry, times)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a scrape every few seconds is not worth a line

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
