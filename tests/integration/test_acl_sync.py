"""Topic ACL sync (sync.topic.acls.*) against brokers running Kafka's standard authorizer.

The session's secured pair (``secured``, ``secured_west``: one node each) runs
``StandardAuthorizer`` with a SASL_PLAINTEXT listener (PLAIN users); the mirror connects over it
as ``mirror``, a super user. Test set-up and checks use the PLAINTEXT listener
(``User:ANONYMOUS``, also a super user in the harness). The session's plain clusters, which run no
authorizer, show the one-line give-up.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient

from mm2py.client.cluster import ClientConfig, ClusterClient
from mm2py.client.connection import ConnectionConfig
from mm2py.client.fetcher import FetcherConfig, RawFetcher
from mm2py.config.security import parse_security
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.acls import TopicAcl, to_binding
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.runtime.spark.driver.flow_runner import SparkFlowRunner
from tests.support.brokers import (
    SASL_USERS,
    BackgroundWorker,
    create_topic,
    make_records,
    mirror_config,
    produce_records,
    total,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


@pytest.fixture(scope="module")
def authz(secured: KafkaCluster, secured_west: KafkaCluster) -> tuple[KafkaCluster, KafkaCluster]:
    """Source and target with the standard authorizer: the session's secured pair."""
    return secured, secured_west


def sasl(user: str) -> dict[str, str]:
    """A client's settings in MM2/Java names."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": f'{PLAIN} required username="{user}" password="{SASL_USERS[user]}";'}


def flow_config(east: KafkaCluster, west: KafkaCluster, topic: str) -> object:
    mirror = sasl("mirror")
    return mirror_config(
        {"east": east.bootstrap_for("SASL_PLAINTEXT"), "west": west.bootstrap_for("SASL_PLAINTEXT")},
        {"east->west": {"topics": topic, "sync.topic.acls.interval.seconds": 1}},
        **{f"{alias}.{k}": v for alias in ("east", "west") for k, v in mirror.items()},
    )


def topic_acls(cluster: KafkaCluster, prefix: str) -> set[TopicAcl]:
    return {a for a in ClusterAdmin(cluster.name, cluster.bootstrap).describe_topic_acls()
            if a.topic.startswith(prefix)}


def create_acls(cluster: KafkaCluster, acls: list[TopicAcl]) -> None:
    assert ClusterAdmin(cluster.name, cluster.bootstrap).create_topic_acls(acls) == acls


def test_literal_topic_acls_reach_the_remote_topic_as_mm2_copies_them(
    authz: tuple[KafkaCluster, KafkaCluster],
) -> None:
    east, west = authz
    topic, other = unique("acl-orders"), unique("acl-other")
    for name in (topic, other):
        create_topic(east.bootstrap, name, partitions=1)
    produce_records(east.bootstrap, topic, make_records(50, tag="acl"))
    create_acls(east, [
        TopicAcl(topic, "LITERAL", "User:reader", "*", "READ", "ALLOW"),
        TopicAcl(topic, "LITERAL", "User:writer", "*", "WRITE", "ALLOW"),
        TopicAcl(topic, "LITERAL", "User:owner", "*", "ALL", "ALLOW"),
        TopicAcl(topic, "LITERAL", "User:blocked", "10.1.2.3", "READ", "DENY"),
        TopicAcl(topic[:8], "PREFIXED", "User:prefixer", "*", "READ", "ALLOW"),
        TopicAcl(other, "LITERAL", "User:reader", "*", "READ", "ALLOW"),  # a topic not mirrored
    ])
    remote = f"east.{topic}"
    expected = {
        TopicAcl(remote, "LITERAL", "User:reader", "*", "READ", "ALLOW"),
        TopicAcl(remote, "LITERAL", "User:owner", "*", "READ", "ALLOW"),  # ALLOW ALL -> READ
        TopicAcl(remote, "LITERAL", "User:blocked", "10.1.2.3", "READ", "DENY"),
    }
    with BackgroundWorker(flow_config(east, west, topic)) as bg:
        wait_until(lambda: topic_acls(west, "east.") == expected, 30, 0.5, "the READ bindings on the target")
        wait_until(lambda: total(west.bootstrap, remote) == 50, 60, 0.2, "mirrored")
        # a binding added later arrives at the next interval
        create_acls(east, [TopicAcl(topic, "LITERAL", "User:late", "*", "DESCRIBE", "ALLOW")])
        late = TopicAcl(remote, "LITERAL", "User:late", "*", "DESCRIBE", "ALLOW")
        wait_until(lambda: topic_acls(west, "east.") == expected | {late}, 30, 0.5, "the later binding")
        status = bg.worker.flows["east->west"].status()["acl_sync"]
    assert status["state"] == "RUNNING" and status["acls_created"] == 4 and status["failures"] == 0
    assert not any(a.operation in ("WRITE", "ALL") and a.permission == "ALLOW" for a in topic_acls(west, ""))
    assert topic_acls(west, "") == expected | {late}  # nothing of the other topic or the prefix

    # the copied ACLs act: reader may fetch the remote topic, writer may not produce to it
    assert asyncio.run(fetch_count(west, "reader", TopicPartition(remote, 0))) == 50
    assert produce_error(west, "writer", remote) == "TOPIC_AUTHORIZATION_FAILED"


async def fetch_count(cluster: KafkaCluster, user: str, tp: TopicPartition) -> int:
    security = parse_security(sasl(user), cluster.name).security_config()
    config = ClientConfig(connection=ConnectionConfig(security=security))
    async with ClusterClient(cluster.bootstrap_for("SASL_PLAINTEXT"), config) as client:
        result = (await RawFetcher(client, FetcherConfig()).fetch({tp: 0}))[tp]
        assert result.error_name == "NONE", result.error_name
        return result.high_watermark


def produce_error(cluster: KafkaCluster, user: str, topic: str) -> str | None:
    conf = {"bootstrap.servers": cluster.bootstrap_for("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": SASL_USERS[user],
            "message.timeout.ms": 10_000}
    errors: list[str] = []
    producer = Producer(conf)
    producer.produce(topic, b"x", on_delivery=lambda err, _m: errors.append(err.name() if err else "NONE"))
    producer.flush(15)
    return errors[0] if errors else None


def test_the_spark_driver_runs_the_acl_sync_too(authz: tuple[KafkaCluster, KafkaCluster]) -> None:
    east, west = authz
    topic = unique("acl-spark")
    create_topic(east.bootstrap, topic, partitions=1)
    create_acls(east, [TopicAcl(topic, "LITERAL", "User:sparky", "*", "ALL", "ALLOW")])
    flow = flow_config(east, west, topic).enabled_flows()[0]  # type: ignore[attr-defined]

    async def run() -> dict[str, object]:
        runner = SparkFlowRunner(flow)
        await runner.start()
        try:
            deadline = time.monotonic() + 30
            while (runner.acl_sync is None or runner.acl_sync.metrics.acls_created < 1) \
                    and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            return runner.status()
        finally:
            await runner.stop()

    status = asyncio.run(run())
    assert status["acl_sync"] is not None and status["acl_sync"]["acls_created"] == 1  # type: ignore[index]
    assert topic_acls(west, f"east.{topic}") == {
        TopicAcl(f"east.{topic}", "LITERAL", "User:sparky", "*", "READ", "ALLOW")}


def test_without_an_authorizer_one_line_and_the_mirror_keeps_working(
    east: KafkaCluster, west: KafkaCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique("acl-none")
    create_topic(east.bootstrap, topic, partitions=1)
    config = mirror_config({"east": east.bootstrap, "west": west.bootstrap},
                           {"east->west": {"topics": topic, "sync.topic.acls.interval.seconds": 1}})
    caplog.set_level(logging.INFO, logger="mm2py.connectors.acl_sync")
    with BackgroundWorker(config) as bg:
        produce_records(east.bootstrap, topic, make_records(40, tag="first"))
        wait_until(lambda: total(west.bootstrap, f"east.{topic}") == 40, 60, 0.2, "records mirrored")
        # the sync gave up for good: its loop ended by itself (no round follows to log again)
        sync = bg.worker.flows["east->west"].acl_sync
        assert sync is not None
        wait_until(lambda: sync.ended, 30, 0.1, "the ACL sync to give up")
        produce_records(east.bootstrap, topic, make_records(10, tag="second"))
        wait_until(lambda: total(west.bootstrap, f"east.{topic}") == 50, 60, 0.2, "later records mirrored")
        status = bg.worker.flows["east->west"].status()["acl_sync"]
    lines = [r for r in caplog.records if r.name == "mm2py.connectors.acl_sync"]
    assert [r.levelno for r in lines] == [logging.INFO], [r.getMessage() for r in lines]
    assert "cluster 'east'" in lines[0].getMessage() and "no ACL authorizer" in lines[0].getMessage()
    assert "sync.topic.acls.enabled=false" in lines[0].getMessage()
    assert status["state"] == "NO_AUTHORIZER" and status["failures"] == 0
    # the target really has none: creating one there is refused for the same reason
    plain = AdminClient({"bootstrap.servers": west.bootstrap})
    future = next(iter(plain.create_acls([to_binding(
        TopicAcl(topic, "LITERAL", "User:x", "*", "READ", "ALLOW"))]).values()))
    with pytest.raises(Exception, match=r"SECURITY_DISABLED|No Authorizer"):
        future.result(15)


def test_following_consumer_offsets_needs_its_acls(authz: tuple[KafkaCluster, KafkaCluster]) -> None:
    """The live group offset sync's feed: refused, with the broker's reason, for a principal without
    DESCRIBE/READ on __consumer_offsets (the sync then polls); a super user follows it."""
    from mm2py.stores.commit_feed import CommitFeedRefusedError, ConsumerOffsetsFeed

    east, _ = authz
    group = unique("acl-feed-g")
    c = Consumer({"bootstrap.servers": east.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[CKTopicPartition(create_topic(east.bootstrap, unique("acl-feed")), 0, 1)],
             asynchronous=False)  # __consumer_offsets exists
    c.close()

    def client(user: str) -> dict[str, str]:
        return {"bootstrap.servers": east.bootstrap_for("SASL_PLAINTEXT"),
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
                "sasl.password": SASL_USERS[user]}

    refused = ConsumerOffsetsFeed(client("reader"), name=unique("feed"))
    try:
        with pytest.raises(CommitFeedRefusedError, match=r"__consumer_offsets refused: .*[Aa]uthoriz"):
            refused.start(30)
    finally:
        refused.close()
    allowed = ConsumerOffsetsFeed(client("mirror"), name=unique("feed"))
    try:
        allowed.start(30)
        assert allowed.partitions > 0 and allowed.poll(0.2) == []  # at the end: nothing read yet
    finally:
        allowed.close()
