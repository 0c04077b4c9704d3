"""`mm2py run --metrics-port` serves Prometheus metrics read from the running tasks."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mm2py.kafka_local import KafkaCluster
from mm2py.kafka_local.cluster import free_port
from tests.support.brokers import config_file, create_topic, make_records, produce_records, unique, wait_until

pytestmark = pytest.mark.integration


def _samples(port: int) -> dict[str, float]:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return {}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}"
                            if s.labels else "")
            out[key] = s.value
    return out


def test_metrics_endpoint_reports_what_was_mirrored(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path
) -> None:
    topic = create_topic(east.bootstrap, unique("metrics"), partitions=2)
    produce_records(east.bootstrap, topic, make_records(1500), compression="zstd")
    cfg = tmp_path / "mm2.json"
    config_file(cfg, {"east": east.bootstrap, "west": west.bootstrap}, {"east->west": {"topics": topic}})
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mm2py.cli", "run", "-c", str(cfg), "--metrics-port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        key = "mm2py_task_records_total{flow=east->west,task=0}"
        wait_until(lambda: _samples(port).get(key) == 1500, 60, 0.5, "1500 records in the metrics")
        samples = _samples(port)
        assert samples["mm2py_task_running{flow=east->west,task=0}"] == 1
        assert samples["mm2py_task_partitions{flow=east->west,task=0}"] == 2
        assert samples["mm2py_codec_operations_total{operation=decompress}"] == 0
        assert samples[f"mm2py_partition_lag_records{{flow=east->west,partition=0,topic={topic}}}"] == 0
        for p in (0, 1):  # time-based figures per partition
            labels = f"{{flow=east->west,partition={p},topic={topic}}}"
            assert samples[f"mm2py_replication_latency_seconds_count{labels}"] > 0
            assert samples[f"mm2py_replication_latency_seconds_sum{labels}"] > 0
            assert samples[f"mm2py_record_age_seconds_count{labels}"] > 0
            assert samples[f"mm2py_partition_lag_seconds{labels}"] == 0  # caught up
        # the worker's own requests per cluster and API: it fetched from east and produced to west
        assert samples["mm2py_requests_total{api=Fetch,cluster=east}"] >= 1
        assert samples["mm2py_requests_total{api=Produce,cluster=west}"] >= 1
        assert samples.get("mm2py_requests_total{api=Produce,cluster=east}", 0) == 0
        _assert_dashboard_names_exported_metrics({k.split("{")[0] for k in samples})
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]


DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana" / "mm2py-dashboard.json"


ALERTS = DASHBOARD.parents[1] / "prometheus" / "mm2py-alerts.yml"


def _dashboard_metric_names() -> set[str]:
    import re

    import yaml

    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in doc["panels"] for t in panel.get("targets", [])]
    assert len(exprs) >= 8
    rules = [r["expr"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    assert len(rules) >= 5
    return {name for expr in exprs + rules for name in re.findall(r"\bmm2py_[a-z_]+", expr)}


def _assert_dashboard_names_exported_metrics(exported: set[str]) -> None:
    """Every series the example Grafana dashboard and alerting rules query is one the worker serves."""
    missing = _dashboard_metric_names() - exported
    assert not missing, f"the dashboard or alerts query metrics the worker does not export: {sorted(missing)}"


def test_worker_status_lines_say_what_runs(east: KafkaCluster, west: KafkaCluster) -> None:
    from tests.support.brokers import BackgroundWorker, end_offsets, mirror_config

    topic = create_topic(east.bootstrap, unique("status"), partitions=3)
    produce_records(east.bootstrap, topic, make_records(900))
    config = mirror_config(
        {"east": east.bootstrap, "west": west.bootstrap}, {"east->west": {"topics": topic}}
    )
    with BackgroundWorker(config) as bg:
        wait_until(lambda: "900 records" in bg.worker.status_lines()[0], 60, 0.2, "status caught up")
        line = bg.worker.status_lines()[0]
    assert line.startswith("east->west: 1 topics, 3 partitions, 900 records") and "tasks RUNNING" in line
    assert ", 0 behind," in line
    assert sum(end_offsets(west.bootstrap, f"east.{topic}").values()) == 900
