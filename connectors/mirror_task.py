"""Builds a runnable mirror task from its picklable :class:`TaskSpec` (used by every runtime)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence

from mm2py.client.cluster import ClusterClient
from mm2py.client.errors import ClientError
from mm2py.client.fetch_hub import FetchHub
from mm2py.client.producer import RawProducer, RequestMux
from mm2py.config.models import FlowConfig
from mm2py.config.security import Side
from mm2py.connectors.client_settings import raw_client_settings
from mm2py.connectors.mirror_sink import MirrorSink
from mm2py.connectors.mirror_source import Linger, MirrorSource
from mm2py.connectors.outgoing import CoalesceSettings
from mm2py.connectors.resume import TailReconciler
from mm2py.connectors.target_limits import Describe, TargetLimits
from mm2py.engine.losses import policies_of
from mm2py.engine.offset_syncs import RunSync
from mm2py.engine.task import TaskRunner
from mm2py.engine.task_contract import TaskSpec
from mm2py.protocol.connect_offsets import Position
from mm2py.protocol.mm2_records import OffsetSync
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin, librdkafka_security
from mm2py.stores.positions import PositionStore, ProgressProducer
from mm2py.stores.sync_writer import OffsetSyncWriter

#: told the offset syncs a task sends, as it sends them
SyncListener = Callable[[Sequence[OffsetSync]], None]
#: the progress topic's admin client and producer, shared by a flow's tasks in one process
SharedProgress = tuple[ClusterAdmin, ProgressProducer]


def bootstrap_of(flow: FlowConfig, side: str) -> str:
    cluster = flow.source_cluster if side == "source" else flow.target_cluster
    return cluster.bootstrap_servers


class FlowProgressKeeper:
    """Progress in ``mm2-offsets.<source>.internal`` and offset syncs where the flow says."""

    def __init__(self, flow: FlowConfig, on_syncs: SyncListener | None = None,
                 shared: SharedProgress | None = None) -> None:
        """``on_syncs``: told the offset syncs as the task sends them (the flow's live group sync);
        ``shared``: the admin client and producer of the progress topic the flow's other tasks in
        this process use too (else clients of its own)."""
        self.flow = flow
        self.on_syncs = on_syncs
        admin, producer = shared or (ClusterAdmin.for_cluster(flow, "target"), None)
        self.progress = PositionStore(admin, flow.source, connector=flow.connector_name, producer=producer)
        self.syncs: OffsetSyncWriter | None = None
        if flow.emit_offset_syncs_enabled:
            side: Side = "source" if flow.offset_syncs_topic_location == "source" else "target"
            security = librdkafka_security(flow, side, "producer")
            history = flow.offset_sync_history_topic() if flow.writes_sync_history else None
            self.syncs = OffsetSyncWriter(bootstrap_of(flow, side), flow.offset_syncs_topic(), security,
                                          history_topic=history)

    def load(self) -> dict[TopicPartition, Position]:
        return self.progress.load()

    def commit(self, positions: Mapping[TopicPartition, Position]) -> None:
        self.progress.commit(positions)

    def send_syncs(self, syncs: Sequence[OffsetSync]) -> None:
        if self.syncs is not None:
            self.syncs.send(syncs, [s for s in syncs if isinstance(s, RunSync)])
            if self.on_syncs is not None:
                self.on_syncs(syncs)

    def flush_syncs(self) -> None:
        if self.syncs is not None:
            self.syncs.flush()

    def close(self) -> None:
        self.progress.close()
        if self.syncs is not None:
            self.syncs.flush()


def coalesce_settings(flow: FlowConfig) -> CoalesceSettings:
    """``mm2py.coalesce.*``; a merged batch is at most 1 MiB (the brokers' default
    ``message.max.bytes``) unless the target size asks for more."""
    return CoalesceSettings(
        enabled=flow.coalesce_enabled,
        threshold=flow.coalesce_threshold_bytes,
        target=flow.coalesce_target_bytes,
        max_bytes=max(1024 * 1024, flow.coalesce_target_bytes),
        lz4_level=flow.coalesce_lz4_level,
    )


def target_limits(flow: FlowConfig) -> TargetLimits:
    """The target topics' batch limits, read with an admin client of the target made at the first
    question (in the thread the question runs in)."""
    admins: list[ClusterAdmin] = []

    def describe(topics: list[str]) -> Mapping[str, int]:
        if not admins:
            admins.append(ClusterAdmin.for_cluster(flow, "target"))
        return admins[0].max_message_bytes(topics)

    ask: Describe = describe
    return TargetLimits(ask)


#: fetches a task hands to the producer before the first is acknowledged (keeps the produce window
#: full across fetch boundaries); with the fetch under way, ``PIPELINE_DEPTH + 1`` fetch responses
#: share ``mm2py.max.inflight.bytes.per.task``
PIPELINE_DEPTH = 3


def _fetch_max(flow: FlowConfig, tasks: int = 1) -> int:
    """A fetch response's bound: ``tasks`` tasks' shares of ``mm2py.max.inflight.bytes.per.task``
    (each task's share: one fetch of its pipeline), at least one partition's, at most
    ``mm2py.fetch.max.bytes``."""
    share = flow.max_inflight_bytes_per_task // (PIPELINE_DEPTH + 1)
    return min(flow.fetch_max_bytes, max(PARTITION_MAX_BYTES, share * tasks))


#: ``max.partition.fetch.bytes`` unless the consumer overrides say otherwise
PARTITION_MAX_BYTES = 1024 * 1024


class FlowClients:
    """What the tasks of one flow in one process share: one client per cluster (one set of
    connections per broker; the producers' requests ready together on a connection go out as one
    request, :class:`RequestMux`, each batch under its own task's producer id), and one
    :class:`FetchHub` (one fetch session per source broker for all the tasks' partitions, paced
    per broker). Tasks stay the unit of assignment, progress and producer id; closing a task
    leaves the hub and these clients to the others. Used by the in-process runtime and by a Spark
    mirror host for the flow's leases on it; a lease run as a Spark job of its own
    (``--spark-mode lease-jobs``) fetches by itself."""

    def __init__(self, flow: FlowConfig, on_syncs: SyncListener | None = None) -> None:
        """``on_syncs``: told every offset sync the tasks send (see :class:`FlowProgressKeeper`)."""
        self.flow = flow
        self.on_syncs = on_syncs
        settings = raw_client_settings(flow, fetch_max_bytes=_fetch_max(flow, flow.tasks_max),
                                       partition_max_bytes=PARTITION_MAX_BYTES)
        self.source = ClusterClient(bootstrap_of(flow, "source"), settings.source_client)
        self.target = ClusterClient(bootstrap_of(flow, "target"), settings.target_client)
        #: None when ``mm2py.fetch.sessions`` is off: each task then fetches by itself
        self.hub: FetchHub | None = None
        #: the tasks' Produce requests ready together on a connection go out as one
        self.mux = RequestMux(settings.producer.max_request_bytes)
        if settings.fetcher.sessions:
            self.hub = FetchHub(self.source, settings.fetcher, _linger(flow))
        self._started: asyncio.Future[tuple[None, None]] | None = None
        #: the target topics' batch limits, learnt once for all the flow's tasks in this process
        self.limits = target_limits(flow)
        #: the progress topic's clients for all the flow's tasks here (their commits together)
        admin = ClusterAdmin.for_cluster(flow, "target")
        self.progress: SharedProgress = (admin, ProgressProducer.for_admin(admin, shared=True))

    async def start(self) -> None:
        """Connect both clients (once; every task waits for the same start)."""
        if self._started is None or (self._started.done() and self._started.exception() is not None):
            self._started = asyncio.gather(self.source.start(), self.target.start())
        started = self._started
        await asyncio.shield(started)

    async def close(self) -> None:
        if self.hub is not None:
            await self.hub.close()
        await asyncio.gather(self.source.close(), self.target.close(), return_exceptions=True)
        await asyncio.to_thread(self.progress[1].close)


def _linger(flow: FlowConfig) -> Linger:
    return Linger(flow.fetch_linger_ms / 1000, flow.fetch_linger_bytes, flow.fetch_linger_partition_us / 1e6,
                  flow.fetch_linger_partitions_min)


async def build_task(
    spec: TaskSpec, *, commit_interval: float = 1.0, clients: FlowClients | None = None
) -> TaskRunner:
    """Connect to both clusters and assemble source, sink and checkpointer for ``spec``: on
    ``clients`` shared with the flow's other tasks in this process, else on clients of its own.

    Both raw clients carry their cluster's TLS/SASL settings (``raw_client_settings``)."""
    flow: FlowConfig = spec.flow
    fetch_max = _fetch_max(flow)
    settings = raw_client_settings(flow, fetch_max_bytes=fetch_max, partition_max_bytes=PARTITION_MAX_BYTES)
    if clients is not None:
        await clients.start()
        source_client, target_client = clients.source, clients.target
    else:
        source_client = ClusterClient(bootstrap_of(flow, "source"), settings.source_client)
        target_client = ClusterClient(bootstrap_of(flow, "target"), settings.target_client)
        await asyncio.gather(source_client.start(), target_client.start())
    member = None
    if clients is not None and clients.hub is not None:
        member = clients.hub.member(f"task {spec.task_id}", budget_bytes=fetch_max)
    source = MirrorSource(source_client, settings.fetcher, reset_to_earliest=settings.reset_to_earliest,
                          linger=_linger(flow), member=member, owns_cluster=clients is None)
    policy = flow.replication_policy()

    def rename(topic: str) -> str:
        return policy.format_remote_topic(flow.source, topic)

    producer = RawProducer(target_client, settings.producer, mux=clients.mux if clients is not None else None)
    producer.start()  # the producer id is asked for while the task resolves its starts
    sink = MirrorSink(producer, rename, coalesce_settings(flow), owns_cluster=clients is None,
                      limits=clients.limits if clients is not None else target_limits(flow))
    sink.learn_ahead(spec.partitions)  # its first puts need not wait for them
    # the target topics' leaders, known before the first put: a successor handed exact positions
    # reads nothing from the target, and on a host that never produced them each topic's first
    # put waited for a metadata refresh of its own
    with contextlib.suppress(ClientError):  # the producer asks again when it needs a leader
        await target_client.ensure_topics({rename(tp.topic) for tp in spec.partitions})
    keeper = (FlowProgressKeeper(flow, clients.on_syncs, clients.progress) if clients is not None
              else FlowProgressKeeper(flow))
    return TaskRunner(
        spec, source, sink, keeper,
        offset_lag_max=flow.offset_lag_max, commit_interval=commit_interval,
        reconcile=TailReconciler(source, target_client, rename), pipeline_depth=PIPELINE_DEPTH,
        alarms=policies_of(flow), verify=flow.verify_enabled,
        idle_check_interval=idle_check_interval(flow),
    )


def idle_check_interval(flow: FlowConfig) -> float | None:
    """How often a task asks its idle partitions' remote ends (engine/idle_check.py): the topic
    refresh interval, MM2's default 600 s when the flow refreshes only at start; None without the
    flow's verification (``mm2py.verify.enabled``)."""
    if not flow.verify_enabled:
        return None
    interval = flow.refresh_topics_interval_seconds
    return float(max(1, interval)) if interval > 0 else 600.0
