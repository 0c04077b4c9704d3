"""Topic and config administration through confluent-kafka's AdminClient (blocking calls).

The engine calls these from worker threads (``asyncio.to_thread``); none of it is on the data path.
Every confluent-kafka client of a flow is configured through :func:`librdkafka_config` or
:meth:`ClusterAdmin.for_cluster` (bootstrap servers plus the cluster's TLS/SASL settings,
:mod:`mm2py.config.security`). A refused TLS handshake or SASL authentication fails an admin call
at once with the broker's reason (:class:`ClusterSecurityError`) instead of waiting for the timeout.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from mm2py.config.models import FlowConfig
from mm2py.config.security import Kind, Side, cluster_security
from mm2py.errors import Mm2pyError
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.acls import TopicAclCalls
from mm2py.rdkafka.admin_settings import admin_settings
from mm2py.rdkafka.admin_types import GroupOffset, GroupState, TopicInfo, TopicSpec, in_calls
from mm2py.rdkafka.cluster_health import (  # noqa: F401 - re-exported: the admin side's errors
    BrokerRefusedError,
    ClusterHealth,
    ClusterSecurityError,
    StoreError,
    interrupt_admin_calls,
)
from mm2py.rdkafka.log import LibrdkafkaLog
from mm2py.retry import Backoff

log = logging.getLogger(__name__)
_RETRIABLE_GROUP_ERRORS = frozenset({
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.REQUEST_TIMED_OUT,
})
#: every confluent-kafka client's ``logger``: each distinct problem once a minute at most
LIBRDKAFKA_LOG = LibrdkafkaLog(logging.getLogger("mm2py.librdkafka"))


_POLL_S = 0.2


class GroupOffsetsRefusedError(StoreError):
    """The broker did not accept a group offset commit (e.g. the group has active members)."""


#: librdkafka defaults mm2py sets for its own clients (a client override still wins).
#: ``reconnect.backoff.ms`` 100 -> 10: a new client waits out this backoff (jittered) before it
#: connects to a broker it learned from the bootstrap metadata, ~50 ms on its first request at the
#: default, and a flow's start creates several clients one after another (admin, progress reader
#: and writer). Reconnects after a failure still back off exponentially, up to
#: ``reconnect.backoff.max.ms`` (10 s); the Java client starts at 50 ms.
LIBRDKAFKA_DEFAULTS: Mapping[str, Any] = {"reconnect.backoff.ms": 10}


def client_config(bootstrap: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": LIBRDKAFKA_LOG, **LIBRDKAFKA_DEFAULTS}
    conf.update(overrides or {})
    return conf


def librdkafka_security(flow: FlowConfig, side: Side, kind: Kind = "admin") -> dict[str, str]:
    """The TLS/SASL properties of one confluent-kafka client of ``flow``'s ``side``."""
    return cluster_security(flow, side, kind).librdkafka()


def librdkafka_config(
    flow: FlowConfig, side: Side, kind: Kind = "admin", extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A complete confluent-kafka configuration for a client of ``flow``'s ``side``: bootstrap
    servers, security, our logger, then ``extra`` (e.g. ``{"acks": "all"}``)."""
    cluster = flow.source_cluster if side == "source" else flow.target_cluster
    security = librdkafka_security(flow, side, kind)
    return client_config(cluster.bootstrap_servers, {**security, **(extra or {})})


def _error_cb(admin: ClusterAdmin) -> Callable[[KafkaError], None]:
    """``admin``'s error callback without a reference to it. A bound method would close a cycle
    (admin -> AdminClient -> callback -> admin) that only the garbage collector frees, and it may run
    on a librdkafka thread (during any callback from librdkafka): destroying a client there makes
    librdkafka abort the process. Without the cycle the client goes with its last reference."""
    ref = weakref.ref(admin)

    def on_error(err: KafkaError) -> None:
        me = ref()
        if me is not None:
            me.health.on_error(err)

    return on_error


class ClusterAdmin(TopicAclCalls):
    """The admin operations mm2py needs on one cluster, with errors that name the cluster."""

    def __init__(
        self, alias: str, bootstrap: str, overrides: Mapping[str, object] | None = None,
        timeout: float = 30.0, unreachable_timeout: float = 5.0,
        admin_settings: Mapping[str, str] | None = None,
    ) -> None:
        self.alias = alias
        self.bootstrap = bootstrap
        self.timeout = timeout
        #: what librdkafka said of the cluster (refused, unreachable), for calls deciding to give up
        self.health = ClusterHealth(alias, bootstrap, timeout, unreachable_timeout)
        #: connection settings (security) shared by the other clients built with :meth:`client_config`
        self.overrides: dict[str, Any] = dict(overrides or {})
        #: admin-only settings (``<alias>.admin.*``): not shared with the other clients
        self.admin_settings = dict(admin_settings or {})
        self._client = AdminClient(client_config(
            bootstrap, {"error_cb": _error_cb(self), **self.overrides, **self.admin_settings}))

    @classmethod
    def for_cluster(cls, flow: FlowConfig, side: Side, *, timeout: float | None = None) -> ClusterAdmin:
        """The admin client of ``flow``'s ``side`` (``admin.timeout.ms`` unless ``timeout`` is given)."""
        alias = flow.source if side == "source" else flow.target
        cluster = flow.source_cluster if side == "source" else flow.target_cluster
        tuned = admin_settings(flow, side)  # <alias>.admin.* overrides
        if timeout is None:
            timeout = tuned.timeout if tuned.timeout is not None else flow.admin_timeout_ms / 1000
        return cls(alias, cluster.bootstrap_servers, librdkafka_security(flow, side, "admin"),
                   timeout=timeout, unreachable_timeout=flow.unreachable_timeout_ms / 1000,
                   admin_settings=tuned.librdkafka)

    def client_config(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Configuration for a producer or consumer of the same cluster, with the same security."""
        return client_config(self.bootstrap, {**self.overrides, **(extra or {})})

    def _fail(self, what: str, exc: BaseException) -> Mm2pyError:
        self._client.poll(0)  # serve error callbacks: the reason may be there
        return self.health.error(what, exc)

    def _result(self, fut: Future[Any], what: str) -> Any:
        """A future's result; a time-out or a TLS/SASL refusal becomes an error naming the cluster."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                result = fut.result(timeout=max(0.0, min(_POLL_S, deadline - time.monotonic())))
            except TimeoutError as exc:
                self._client.poll(0)
                if self.health.given_up(deadline):
                    raise self._fail(what, exc) from None
                continue
            self.health.reached()
            return result

    def list_topics(self) -> dict[str, TopicInfo]:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                md = self._client.list_topics(timeout=max(0.01, min(1.0, deadline - time.monotonic())))
                self.health.reached()
                break
            except KafkaException as exc:
                self._client.poll(0)
                if self.health.given_up(deadline):
                    raise self._fail("listing topics", exc) from exc
        out = {}
        for name, t in md.topics.items():
            if t.error is not None:
                continue
            rf = len(next(iter(t.partitions.values())).replicas) if t.partitions else 0
            out[name] = TopicInfo(name, len(t.partitions), rf)
        return out

    def topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """Non-default (explicitly set) configs of each topic."""
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
        if not resources:
            return {}
        out: dict[str, dict[str, str]] = {}
        for res, fut in self._client.describe_configs(resources, request_timeout=self.timeout).items():
            try:
                entries = self._result(fut, f"describing configs of {res.name}")
            except KafkaException as exc:
                log.warning("describe configs of %s on %s: %s", res.name, self.alias, exc)
                continue
            out[res.name] = {
                k: v.value for k, v in entries.items()
                if v.value is not None and not v.is_default and not v.is_sensitive
                and v.source == 1  # DYNAMIC_TOPIC_CONFIG: set on the topic itself
            }
        return out

    def max_message_bytes(self, topics: Iterable[str]) -> dict[str, int]:
        """Each topic's ``max.message.bytes`` as the brokers apply it (set on the topic, or the
        broker's ``message.max.bytes`` default): the largest batch it accepts. A topic that cannot
        be described (absent, not allowed) is left out."""
        key = "max.message.bytes"
        return {t: int(c[key]) for t, c in self.applied_configs(topics, (key,)).items() if key in c}

    def applied_configs(self, topics: Iterable[str], keys: Iterable[str]) -> dict[str, dict[str, str]]:
        """Each topic's ``keys`` as the brokers apply them (set on the topic, on the broker, or
        Kafka's defaults). A topic that cannot be described (absent, not allowed) is left out."""
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
        wanted = frozenset(keys)
        out: dict[str, dict[str, str]] = {}
        if not resources:
            return out
        for res, fut in self._client.describe_configs(resources, request_timeout=self.timeout).items():
            try:
                entries = self._result(fut, f"describing configs of {res.name}")
            except KafkaException as exc:
                log.warning("describe configs of %s on %s: %s", res.name, self.alias, exc)
                continue
            out[res.name] = {k: v.value for k, v in entries.items() if k in wanted and v.value is not None}
        return out

    def create_topics(self, topics: Iterable[TopicSpec]) -> list[str]:
        """Create topics; ones that already exist are fine. Returns the names created."""
        created: list[str] = []
        for call in in_calls(topics, lambda t: 1 + t.partitions + len(t.config)):
            new = [NewTopic(t.name, t.partitions, t.replication_factor, config=dict(t.config)) for t in call]
            created += self._created(self._client.create_topics(new, request_timeout=self.timeout))
        return created

    def _created(self, futures: Mapping[str, Future[Any]]) -> list[str]:
        created = []
        for name, fut in futures.items():
            try:
                self._result(fut, f"creating topic {name}")
                created.append(name)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                raise self._fail(f"creating topic {name}", exc) from exc
        return created

    def ensure_compacted_topic(self, name: str, replication_factor: int = -1, partitions: int = 1) -> None:
        self.create_topics([TopicSpec(name, partitions, replication_factor, {"cleanup.policy": "compact"})])

    def add_partitions(self, counts: Mapping[str, int]) -> dict[str, str]:
        """Grow each topic to its count; returns the topics whose growth the cluster refused (an
        ACL, a policy, a broker's limit), each with the reason in words. An unreachable cluster
        raises."""
        refused: dict[str, str] = {}
        for call in in_calls(counts.items(), lambda tn: tn[1]):  # the new total bounds what is added
            refused.update(self._grown(self._client.create_partitions(
                [NewPartitions(t, n) for t, n in call], request_timeout=self.timeout)))
        return refused

    def _grown(self, futures: Mapping[str, Future[Any]]) -> dict[str, str]:
        refused = {}
        for name, fut in futures.items():
            try:
                self._result(fut, f"adding partitions to {name}")
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError.INVALID_PARTITIONS:
                    continue  # already grown by someone else
                if error.code() < 0:  # librdkafka's own (transport, time-out): not the cluster's answer
                    raise self._fail(f"adding partitions to {name}", exc) from exc
                refused[name] = f"{error.name()}: {error.str()}"
        return refused

    def alter_topic_configs(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """Set (incrementally) the given configs on each topic."""
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

        resources = [
            ConfigResource(
                ConfigResource.Type.TOPIC, topic,
                incremental_configs=[
                    ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                    for k, v in cfg.items()
                ],
            )
            for topic, cfg in configs.items() if cfg
        ]
        if not resources:
            return
        for res, fut in self._client.incremental_alter_configs(resources).items():
            try:
                self._result(fut, f"altering configs of {res.name}")
            except KafkaException as exc:
                log.warning("config sync of %s on %s failed: %s", res.name, self.alias, exc)

    # -- consumer groups (checkpoints, group offset sync, failover) -------------------------------
    def list_groups(self) -> list[str]:
        """Ids of all consumer groups the cluster knows."""
        try:
            listing = self._result(
                self._client.list_consumer_groups(request_timeout=self.timeout), "listing consumer groups"
            )
        except KafkaException as exc:
            raise self._fail("listing consumer groups", exc) from exc
        for err in listing.errors or ():
            log.warning("listing consumer groups on %s: %s", self.alias, err)
        return sorted(g.group_id for g in listing.valid or ())

    def group_offsets(self, groups: Iterable[str]) -> dict[str, dict[TopicPartition, GroupOffset]]:
        """Committed offsets of each group (partitions without a committed offset left out)."""
        futures = {
            g: self._client.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g)], request_timeout=self.timeout
            )[g]
            for g in groups
        }
        out: dict[str, dict[TopicPartition, GroupOffset]] = {}
        for group, fut in futures.items():
            try:
                result = self._result(fut, f"listing offsets of group {group}")
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                    out[group] = {}
                    continue
                raise self._fail(f"listing offsets of group {group}", exc) from exc
            out[group] = {
                TopicPartition(tp.topic, tp.partition): GroupOffset(tp.offset, tp.metadata or "")
                for tp in result.topic_partitions or ()
                if tp.error is None and tp.offset >= 0
            }
        return out

    def group_states(self, groups: Iterable[str]) -> dict[str, GroupState]:
        groups = list(groups)
        if not groups:
            return {}
        out: dict[str, GroupState] = {}
        futures = self._client.describe_consumer_groups(groups, request_timeout=self.timeout)
        for group, fut in futures.items():
            try:
                desc = self._result(fut, f"describing group {group}")
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                    out[group] = GroupState("NOT_FOUND")
                    continue
                raise self._fail(f"describing group {group}", exc) from exc
            state = getattr(desc.state, "name", str(desc.state))
            out[group] = GroupState(state, len(desc.members or ()))
        return out

    def alter_group_offsets(self, group: str, offsets: Mapping[TopicPartition, GroupOffset]) -> None:
        """Commit ``offsets`` for ``group``; the broker refuses it while the group has members.

        Retriable refusals (the group coordinator is loading or moved) are retried until the timeout.
        """
        if not offsets:
            return
        backoff = Backoff(0.1, 1.0, timeout=self.timeout, since=time.monotonic())
        while True:
            errors = self._alter_group_offsets_once(group, offsets)
            if not errors:
                return
            retriable = all(e.retriable() or e.code() in _RETRIABLE_GROUP_ERRORS for e in errors)
            delay = backoff.next_delay()
            if not retriable or delay > backoff.left(time.monotonic()):  # it would end too late
                raise GroupOffsetsRefusedError(
                    f"cluster '{self.alias}': committing offsets of group {group} failed: "
                    + "; ".join(sorted({e.str() for e in errors}))
                )
            time.sleep(delay)

    def _alter_group_offsets_once(
        self, group: str, offsets: Mapping[TopicPartition, GroupOffset]
    ) -> list[KafkaError]:
        request = ConsumerGroupTopicPartitions(group, [
            CKTopicPartition(tp.topic, tp.partition, o.offset, o.metadata)
            for tp, o in sorted(offsets.items())
        ])
        fut = self._client.alter_consumer_group_offsets([request], request_timeout=self.timeout)[group]
        try:
            result = self._result(fut, f"committing offsets of group {group}")
        except KafkaException as exc:
            return [exc.args[0]]
        return [tp.error for tp in result.topic_partitions or () if tp.error]
