"""Topic and config administration through confluent-kafka's AdminClient (blocking calls).

The engine calls these from worker threads (``asyncio.to_thread``); none of it is on the data path.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

log = logging.getLogger(__name__)
_LIBRDKAFKA_LOG = logging.getLogger("mm2py.librdkafka")


class ClusterUnreachableError(RuntimeError):
    """A cluster did not answer within the timeout."""


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    replication_factor: int


def client_config(bootstrap: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": _LIBRDKAFKA_LOG}
    conf.update(overrides or {})
    return conf


class ClusterAdmin:
    """The admin operations mm2py needs on one cluster, with errors that name the cluster."""

    def __init__(
        self, alias: str, bootstrap: str, overrides: Mapping[str, object] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.alias = alias
        self.bootstrap = bootstrap
        self.timeout = timeout
        self._client = AdminClient(client_config(bootstrap, overrides))

    def _fail(self, what: str, exc: BaseException) -> ClusterUnreachableError:
        reason = str(exc) or f"no answer within {self.timeout:.0f}s"
        return ClusterUnreachableError(f"cluster '{self.alias}' ({self.bootstrap}): {what} failed: {reason}")

    def _result(self, fut: Future[Any], what: str) -> Any:
        """A future's result; a time-out becomes an error that names the cluster."""
        try:
            return fut.result(timeout=self.timeout)
        except TimeoutError as exc:
            raise self._fail(what, exc) from None

    def list_topics(self) -> dict[str, TopicInfo]:
        try:
            md = self._client.list_topics(timeout=self.timeout)
        except KafkaException as exc:
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

    def create_topics(self, topics: Iterable[NewTopic]) -> list[str]:
        """Create topics; ones that already exist are fine. Returns the names created."""
        topics = list(topics)
        if not topics:
            return []
        created = []
        futures = self._client.create_topics(topics, request_timeout=self.timeout)
        for name, fut in futures.items():
            try:
                self._result(fut, f"creating topic {name}")
                created.append(name)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                raise self._fail(f"creating topic {name}", exc) from exc
        return created

    def ensure_compacted_topic(self, name: str, replication_factor: int = -1) -> None:
        self.create_topics([NewTopic(
            name, 1, replication_factor, config={"cleanup.policy": "compact"},
        )])

    def add_partitions(self, counts: Mapping[str, int]) -> None:
        if not counts:
            return
        futures = self._client.create_partitions(
            [NewPartitions(t, n) for t, n in counts.items()], request_timeout=self.timeout
        )
        for name, fut in futures.items():
            try:
                self._result(fut, f"adding partitions to {name}")
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.INVALID_PARTITIONS:
                    continue  # already grown by someone else
                raise self._fail(f"adding partitions to {name}", exc) from exc

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
