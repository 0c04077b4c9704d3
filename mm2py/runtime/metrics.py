"""Prometheus metrics of a worker, read from the tasks at scrape time (nothing on the hot path).

``mm2py run --metrics-port 9108`` serves them at ``http://host:9108/metrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from mm2py.client.oauth import token_fetches
from mm2py.client.reauth import SASL_SESSIONS
from mm2py.client.request_counts import REQUESTS, api_name
from mm2py.engine.task_contract import TASK_COUNTERS, TaskState
from mm2py.runtime.flows import FlowRunnerBase
from mm2py.runtime.host_figures import HostFigures
from mm2py.runtime.loop_watch import LoopWatch
from mm2py.runtime.metrics_page import HISTOGRAMS, LAG, partition_times
from mm2py.runtime.worker_base import WorkerBase

_TASK_COUNTER_HELP = {
    "batches": "Record batches delivered to the target",
    "records": "Records delivered to the target",
    "bytes": "Record batch bytes delivered to the target",
    "rebuilt_batches": "Batches rebuilt because the source had offset gaps (compaction)",
    "split_batches": "Batches produced as pieces of a source batch larger than the target topic accepts",
    "syncs": "Offset syncs emitted",
    "commits": "Progress commits",
    "commit_failures": "Progress commits that failed (retried on the next interval)",
    "sink_failures": "Produce rounds that failed and were retried from the last acknowledged batch",
    "skipped_on_resume": "Source offsets found already on the target after a restart",
    "offsets_lost_to_retention": "Source offsets deleted by retention before they were mirrored",
    "restarts": "Times the task failed and was started again from its committed progress",
    "audit_verified_batches": ("Batches the target acknowledged exactly where the mirror's previous batch "
                               "ended, with the CRC carried over from the fetched batch's"),
    "audit_source_deleted": "Alarms: source offsets deleted (retention, DeleteRecords) before mirrored",
    "audit_source_truncated": "Alarms: the source log ended below the mirror's position",
    "audit_source_recreated": "Alarms: the source topic deleted and created again (a new topic id)",
    "audit_target_truncated": "Alarms: the target went back below the end of the mirror's last batch",
    "audit_foreign_records": "Alarms: records of another producer found between the mirror's on the target",
    "audit_records_too_large": "Alarms: records larger than the target topic accepts even alone",
    "target_throttle_ms": ("Milliseconds the target's brokers asked the task's producer to wait under a "
                           "client quota (throttle_time_ms; honoured, no alarm)"),
}
#: one help text per task counter, in TASK_COUNTERS' order (a counter without one fails at import)
_TASK_COUNTERS = {name: _TASK_COUNTER_HELP[name] for name in TASK_COUNTERS}

_CHECKPOINT_COUNTERS = {
    "checkpoints_emitted": "Checkpoint records written to the target's checkpoints topic",
    "group_syncs": "Offset commits made to consumer groups on the target (sync.group.offsets)",
    "offsets_synced": "Partition offsets committed to consumer groups on the target",
    "skipped_active_groups": "Group offset syncs left out because the group had members on the target",
    "failures": "Checkpoint connector jobs that failed (retried on the next interval)",
}


_SASL_COUNTERS = {
    "reauthentications": "SASL re-authentications of open connections before their session ended (KIP-368)",
    "reauthentication_failures": "SASL re-authentications that failed (the connection was closed)",
    "expired_closes": "Connections the broker closed after their SASL session had ended",
}

_ACL_COUNTERS = {
    "syncs": "Topic ACL sync rounds completed (sync.topic.acls)",
    "acls_created": "Topic ACL bindings created on the target by the ACL sync",
    "failures": "Topic ACL sync rounds that failed (retried on the next interval)",
}


class WorkerCollector(Collector):
    """Reads any runtime's worker: the in-process ``Worker`` or the ``SparkWorker``."""

    def __init__(self, worker: WorkerBase[Any], *, partition_times: bool = True) -> None:
        self.worker = worker
        #: whether :meth:`collect` yields the per-partition time families (a served page writes
        #: them as text: :class:`~mm2py.runtime.metrics_page.PartitionTimesPage`)
        self.partition_times = partition_times

    @property
    def flows(self) -> Mapping[str, FlowRunnerBase[Any]]:
        return self.worker.flows

    def collect(self) -> Iterator[Metric]:
        labels = ["flow", "task"]
        counters = {
            # the alarms and verified batches as mm2py_audit_* (engine/losses.py)
            name: CounterMetricFamily(f"mm2py_{'audit_' if name.startswith('audit_') else 'task_'}"
                                      f"{name.removeprefix('audit_')}", help_, labels=labels)
            for name, help_ in _TASK_COUNTERS.items()
        }
        lag = GaugeMetricFamily(
            "mm2py_partition_lag_records", "Source high watermark minus the next offset to fetch",
            labels=["flow", "topic", "partition"],
        )
        up = GaugeMetricFamily("mm2py_task_running", "1 while the task runs", labels=labels)
        partitions = GaugeMetricFamily("mm2py_task_partitions", "Source partitions assigned", labels=labels)
        refused = GaugeMetricFamily(
            "mm2py_partition_refused", "1 while the target refuses the source partition's batches "
            "(it rests alone and is retried; the cause as the broker's error name)",
            labels=["flow", "topic", "partition", "cause"])
        waiting = GaugeMetricFamily(
            "mm2py_partition_waiting", "1 while the source partition waits for the target (too few "
            "in-sync replicas: it rests alone and is retried, no alarm; the cause as the broker's "
            "error name)", labels=["flow", "topic", "partition", "cause"])
        for flow_name, flow in self.flows.items():
            for task_id, runner in flow.tasks.items():
                values = [flow_name, str(task_id)]
                m = runner.metrics
                for name, family in counters.items():
                    family.add_metric(values, float(getattr(m, name)))
                up.add_metric(values, 1.0 if runner.state == TaskState.RUNNING else 0.0)
                partitions.add_metric(values, float(len(runner.partitions)))
                for tp, records in m.lag.items():
                    lag.add_metric([flow_name, tp.topic, str(tp.partition)], float(records))
                for r in getattr(runner, "refused_partitions", ()):
                    topic, _, partition = str(r["partition"]).rpartition("-")
                    refused.add_metric([flow_name, topic, partition, str(r["cause"])], 1.0)
                for w in getattr(runner, "waiting_for_target", ()):
                    if "partition" in w:  # a broker's throttle is counted in target_throttle_ms
                        topic, _, partition = str(w["partition"]).rpartition("-")
                        waiting.add_metric([flow_name, topic, partition, str(w["cause"])], 1.0)
        yield from counters.values()
        yield lag
        yield up
        yield partitions
        yield refused
        yield waiting
        if self.partition_times:
            yield from self._time_metrics()
        yield from self._checkpoint_metrics()
        yield from self._acl_metrics()
        yield from self._retention_metrics()
        yield from _client_metrics()
        # a runtime whose tasks run in processes of their own says their figures (Spark's hosts)
        figures: Callable[[], list[HostFigures]] | None = getattr(self.worker, "host_figures", None)
        yield from _host_metrics(figures() if figures is not None else [])
        yield self._codec_metrics()

    def _codec_metrics(self) -> Metric:
        codec = CounterMetricFamily(
            "mm2py_codec_operations",
            "Decompressions and compressions done by the worker's tasks (Spark: on its executors too)",
            labels=["operation"],
        )
        decompressions, compressions = self.worker.codec_operations()
        codec.add_metric(["decompress"], float(decompressions))
        codec.add_metric(["compress"], float(compressions))
        return codec

    def _time_metrics(self) -> Iterator[Metric]:
        """Replication latency, record age (histograms) and lag in time, per partition (served
        pages write these as text instead: :mod:`mm2py.runtime.metrics_page`)."""
        labels = ["flow", "topic", "partition"]
        (rep_name, rep_help, _), (age_name, age_help, _) = HISTOGRAMS
        replication = HistogramMetricFamily(rep_name, rep_help, labels=labels)
        age = HistogramMetricFamily(age_name, age_help, labels=labels)
        lag = GaugeMetricFamily(*LAG, labels=labels)
        for flow_name, tp, times in partition_times(self.flows):
            values = [flow_name, tp.topic, str(tp.partition)]
            replication.add_metric(values, times.replication.cumulative(), times.replication.total)
            age.add_metric(values, times.age.cumulative(), times.age.total)
            lag.add_metric(values, times.lag_seconds)
        yield replication
        yield age
        yield lag

    def _checkpoint_metrics(self) -> Iterator[Metric]:
        counters = {
            name: CounterMetricFamily(f"mm2py_checkpoint_{name}", help_, labels=["flow"])
            for name, help_ in _CHECKPOINT_COUNTERS.items()
        }
        groups = GaugeMetricFamily(
            "mm2py_checkpoint_groups", "Source consumer groups selected for checkpointing", labels=["flow"]
        )
        latency = HistogramMetricFamily(
            "mm2py_checkpoint_latency_seconds",
            "A group's offsets read on the source to its checkpoints acknowledged on the target",
            labels=["flow", "group"])
        live = HistogramMetricFamily(
            "mm2py_group_sync_latency_seconds",
            "Live group offset sync: a source group's commit (its time on the source) to the translated "
            "offset acknowledged by the target group", labels=["flow"])
        for flow_name, flow in self.flows.items():
            if flow.checkpoints is None:
                continue
            m = flow.checkpoints.metrics
            for name, family in counters.items():
                family.add_metric([flow_name], float(getattr(m, name)))
            groups.add_metric([flow_name], float(m.groups))
            for group, h in sorted(m.latency.items()):
                latency.add_metric([flow_name, group], h.cumulative(), h.total)
            if flow.checkpoints.live is not None:
                live.add_metric([flow_name], m.sync_latency.cumulative(), m.sync_latency.total)
        yield from counters.values()
        yield groups
        yield latency
        yield live

    def _acl_metrics(self) -> Iterator[Metric]:
        counters = {
            name: CounterMetricFamily(f"mm2py_acl_sync_{name}", help_, labels=["flow"])
            for name, help_ in _ACL_COUNTERS.items()
        }
        for flow_name, flow in self.flows.items():
            acl_sync = getattr(flow, "acl_sync", None)  # a flow runner without one: no figures
            if acl_sync is not None:
                for name, family in counters.items():
                    family.add_metric([flow_name], float(getattr(acl_sync.metrics, name)))
        yield from counters.values()

    def _retention_metrics(self) -> Iterator[Metric]:
        """The target.retention alarm (connectors/sync_history.py): raised so far per flow, and the
        offsets each remote partition lost that its source still holds."""
        raised = CounterMetricFamily("mm2py_alarm_target_retention", "target.retention alarms: the target "
                                     "deleted records its source still holds", labels=["flow"])
        lost = GaugeMetricFamily("mm2py_target_retention_offsets", "Offsets the target deleted that the "
                                 "source still holds", labels=["flow", "topic", "partition"])
        for flow_name, flow in self.flows.items():
            pruner = getattr(flow, "pruner", None)  # None: no sync history kept (yet)
            if pruner is not None:
                raised.add_metric([flow_name], float(pruner.retention_alarms))
                for loss, _cause in pruner.retention_losses.values():
                    lost.add_metric([flow_name, loss.partition.topic, str(loss.partition.partition)],
                                    float(loss.offsets))
        yield raised
        yield lost


def _client_metrics() -> Iterator[Metric]:
    """SASL session figures of this process's raw connections, the requests they sent (per API),
    and OAUTHBEARER tokens obtained, per cluster (a Spark mirror host's requests are its own:
    ``mm2py_host_requests_total``)."""
    counters = {
        name: CounterMetricFamily(f"mm2py_sasl_{name}", help_, labels=["cluster"])
        for name, help_ in _SASL_COUNTERS.items()
    }
    for cluster, counts in sorted(SASL_SESSIONS.snapshot().items()):
        for name, family in counters.items():
            family.add_metric([cluster], float(getattr(counts, name)))
    yield from counters.values()
    requests = CounterMetricFamily("mm2py_requests", "Requests sent to a cluster's brokers by this process's "
                                   "raw connections, per API", labels=["cluster", "api"])
    for (cluster, api_key), n in sorted(REQUESTS.snapshot().items()):
        requests.add_metric([cluster, api_name(api_key)], float(n))
    yield requests
    tokens = CounterMetricFamily("mm2py_oauth_tokens", "OAUTHBEARER tokens obtained (first and refreshed)",
                                 labels=["cluster"])
    for cluster, n in sorted(token_fetches().items()):
        tokens.add_metric([cluster], float(n))
    yield tokens


def _host_metrics(hosts: list[HostFigures]) -> Iterator[Metric]:
    """The Spark mirror hosts' own figures, per host, as each last said (none in-process)."""
    labels = ["host", "executor"]
    requests = CounterMetricFamily("mm2py_host_requests", "Requests sent to a cluster's brokers by a "
                                   "mirror host's raw connections, per API",
                                   labels=[*labels, "cluster", "api"])
    cpu = CounterMetricFamily("mm2py_host_cpu_seconds", "CPU time of a mirror host's process "
                              "(user and system)", labels=labels)
    rss = GaugeMetricFamily("mm2py_host_resident_bytes", "Resident memory of a mirror host's process",
                            labels=labels)
    leases = GaugeMetricFamily("mm2py_host_leases", "Leases placed on a mirror host", labels=labels)
    partitions = GaugeMetricFamily("mm2py_host_partitions", "Source partitions of the leases placed on "
                                   "a mirror host", labels=labels)
    for h in hosts:
        values = [h.host, h.executor]
        for (cluster, api_key), n in sorted(h.requests.items()):
            requests.add_metric([*values, cluster, api_name(api_key)], float(n))
        cpu.add_metric(values, h.cpu_seconds)
        rss.add_metric(values, float(h.rss_bytes))
        leases.add_metric(values, float(h.leases))
        partitions.add_metric(values, float(h.partitions))
    yield from (requests, cpu, rss, leases, partitions)


class LoopWatchCollector(Collector):
    """The event-loop watchdog's counts (:class:`mm2py.runtime.loop_watch.LoopWatch`)."""

    def __init__(self, watch: LoopWatch) -> None:
        self.watch = watch

    def collect(self) -> Iterator[Metric]:
        w = self.watch
        yield CounterMetricFamily("mm2py_event_loop_stalls", "Times the worker's event loop stood still "
                                  "for the watch threshold (100 ms) or longer", value=w.stalls)
        yield CounterMetricFamily("mm2py_event_loop_stalled_seconds", "Time the event loop stood still "
                                  "in those stalls", value=w.stalled_seconds)
        yield GaugeMetricFamily("mm2py_event_loop_longest_stall_seconds", "The longest stall so far",
                                value=w.longest)
