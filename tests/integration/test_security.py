"""TLS and SASL against a real secured broker: raw client, confluent-kafka clients, a whole mirror
flow.

The session's ``secured`` cluster (one node) has a SASL_SSL listener (PLAIN, SCRAM-SHA-256/512
users) and an SSL listener that requires a client certificate, next to the PLAINTEXT listener the
tests use for set-up and checks. It runs the standard authorizer (the ACL sync tests need it);
``alice`` and the client certificate's principal are super users, so nothing here depends on ACLs.
Every client under test is configured from MM2/Java property names.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CKTopicPartition

from mm2py.client.cluster import ClientConfig, ClusterClient
from mm2py.client.connection import AuthenticationError, ConnectionConfig, TlsError
from mm2py.client.fetcher import FetcherConfig, RawFetcher
from mm2py.client.producer import ProducerConfig, RawProducer
from mm2py.config.models import MirrorMakerConfig
from mm2py.config.security import parse_security
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.errors_codes import NONE
from mm2py.protocol.mm2_records import Checkpoint
from mm2py.protocol.record_codec import decode_records
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin, ClusterSecurityError
from mm2py.stores.positions import PositionStore
from tests.support.brokers import (
    BackgroundWorker,
    create_topic,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    read_syncs,
    total,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

USER, PASSWORD = "alice", "alice-secret"
MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def sasl_ssl_props(
    cluster: KafkaCluster, mechanism: str = "SCRAM-SHA-512", password: str = PASSWORD, ca: str | None = None
) -> dict[str, str]:
    """A client's security settings, exactly as they would be written in an mm2.properties."""
    assert cluster.tls is not None
    module = MODULES["PLAIN" if mechanism == "PLAIN" else "SCRAM"]
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": f'{module} required username="{USER}" password="{password}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": ca or str(cluster.tls.ca),
    }


def raw_client(bootstrap: str, props: dict[str, str]) -> ClusterClient:
    security = parse_security(props, "secured").security_config()
    return ClusterClient(bootstrap, ClientConfig(connection=ConnectionConfig(security=security)))


async def fetch_all(client: ClusterClient, tp: TopicPartition) -> list[RecordBatch]:
    fetcher = RawFetcher(client, FetcherConfig(partition_max_bytes=64 * 1024))
    out: list[RecordBatch] = []
    pos = 0
    while True:
        res = (await fetcher.fetch({tp: pos}))[tp]
        assert res.error_code == NONE, res.error_name
        out.extend(RecordBatch(bytes(b)) for b in res.batches)
        pos = res.next_offset
        if pos >= res.last_stable_offset:
            return out


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_raw_fetch_and_produce_over_sasl_ssl(secured: KafkaCluster, mechanism: str) -> None:
    source = create_topic(secured.bootstrap, unique("sec-src"))
    target = create_topic(secured.bootstrap, unique("sec-dst"))
    sent = make_records(200, partition=0, tag=mechanism)
    produce_records(secured.bootstrap, source, sent, compression="lz4", extra={"batch.num.messages": 50})

    async with raw_client(secured.bootstrap_for("SASL_SSL"), sasl_ssl_props(secured, mechanism)) as client:
        batches = await fetch_all(client, TopicPartition(source, 0))
        assert sum(b.records_count for b in batches) == len(sent)
        assert [r.value for b in batches for r in decode_records(b)] == [r.value for r in sent]
        producer = RawProducer(client, ProducerConfig(idempotent=True))
        offsets = await producer.produce([(TopicPartition(target, 0), b) for b in batches])
    assert offsets == [b.base_offset for b in batches]
    got = read_all(secured.bootstrap, target, expect=len(sent))
    assert [r.content() for r in got] == [r.content() for r in sent]


async def test_mutual_tls_with_an_encrypted_client_key(secured: KafkaCluster) -> None:
    assert secured.tls is not None
    topic = create_topic(secured.bootstrap, unique("mtls"))
    produce_records(secured.bootstrap, topic, make_records(20, partition=0))
    props = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(secured.tls.ca),
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": secured.tls.client_cert.read_text(),
        "ssl.keystore.key": secured.tls.client_key.read_text(), "ssl.key.password": "client-key-secret",
    }
    async with raw_client(secured.bootstrap_for("SSL"), props) as client:
        assert sum(b.records_count for b in await fetch_all(client, TopicPartition(topic, 0))) == 20

    no_cert = {k: v for k, v in props.items() if not k.startswith(("ssl.keystore", "ssl.key."))}
    started = time.monotonic()
    with pytest.raises(TlsError, match=r"cluster 'secured'.*(BAD_CERTIFICATE|CERTIFICATE_REQUIRED)"):
        async with raw_client(secured.bootstrap_for("SSL"), no_cert):
            pass
    assert time.monotonic() - started < 5


async def test_wrong_password_fails_at_once_with_the_brokers_reason(secured: KafkaCluster) -> None:
    props = sasl_ssl_props(secured, "SCRAM-SHA-512", password="not-the-password")
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        async with raw_client(secured.bootstrap_for("SASL_SSL"), props):
            pass
    message = str(info.value)
    assert "SCRAM-SHA-512" in message and "'alice'" in message and "cluster 'secured'" in message
    assert "SASL_AUTHENTICATION_FAILED" in message and "invalid credentials" in message
    assert "not-the-password" not in message
    assert time.monotonic() - started < 5  # not retried until the 30 s retry timeout

    admin = ClusterAdmin("secured", secured.bootstrap_for("SASL_SSL"),
                         parse_security(props, "secured").librdkafka(), timeout=30)
    started = time.monotonic()
    with pytest.raises(ClusterSecurityError, match=r"cluster 'secured'.*SASL authentication error"):
        await asyncio.to_thread(admin.list_topics)
    assert time.monotonic() - started < 10


async def test_an_untrusted_broker_certificate_fails_clearly(secured: KafkaCluster) -> None:
    assert secured.tls is not None
    props = sasl_ssl_props(secured, ca=str(secured.tls.other_ca))
    with pytest.raises(TlsError, match=r"cluster 'secured'.*unable to get local issuer certificate"):
        async with raw_client(secured.bootstrap_for("SASL_SSL"), props):
            pass
    with pytest.raises(TlsError, match="answers with TLS"):  # PLAINTEXT client, TLS listener
        async with raw_client(secured.bootstrap_for("SASL_SSL"), {}):
            pass
    admin = ClusterAdmin("secured", secured.bootstrap_for("SASL_SSL"),
                         parse_security(props, "secured").librdkafka(), timeout=30)
    started = time.monotonic()
    with pytest.raises(ClusterSecurityError, match=r"cluster 'secured'.*certificate verify failed"):
        await asyncio.to_thread(admin.list_topics)
    assert time.monotonic() - started < 10


def test_mirror_flow_from_a_secured_cluster(secured: KafkaCluster, west: KafkaCluster) -> None:
    """The whole flow in MM2 names: controller, raw fetch, offset syncs (on the secured source),
    progress (on the plain target) and a checkpoint of a group that consumed on the secured source."""
    topic = create_topic(secured.bootstrap, unique("sec-flow"), partitions=2)
    sent = make_records(300, tag="secure")
    sent = [r.__class__(r.key, r.value, r.headers, r.timestamp, i % 2) for i, r in enumerate(sent)]
    produce_records(secured.bootstrap, topic, sent, compression="zstd")
    group = unique("sec-group")
    committer = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": group})
    committer.commit(offsets=[CKTopicPartition(topic, p, 100) for p in (0, 1)], asynchronous=False)
    committer.close()
    security = {f"east.{k}": v for k, v in sasl_ssl_props(secured).items()}
    config = mirror_config(
        {"east": secured.bootstrap_for("SASL_SSL"), "west": west.bootstrap},
        {"east->west": {"topics": topic, "groups": group, "offset.lag.max": 10,
                        "emit.checkpoints.interval.seconds": 1, "refresh.groups.interval.seconds": 1}},
        **security,
    )
    assert isinstance(config, MirrorMakerConfig)
    assert config.clusters["east"].connection["security.protocol"] == "SASL_SSL"
    mirrored = f"east.{topic}"
    west = ClusterAdmin("west", west.bootstrap)

    def all_mirrored() -> bool:
        if mirrored not in west.list_topics():
            return False
        return total(west.bootstrap, mirrored) >= len(sent)

    def checkpointed() -> list[Checkpoint]:
        if "east.checkpoints.internal" not in west.list_topics():
            return []
        records = read_all(west.bootstrap, "east.checkpoints.internal", timeout=5)
        return [c for c in (Checkpoint.from_record(r.key, r.value) for r in records) if c.group == group]

    with BackgroundWorker(config):
        wait_until(all_mirrored, timeout=60, what="records mirrored from the secured cluster")
        # a checkpoint taken before the mirror passed offset 100 says "behind" (100 -> the mirror's
        # position then); once the mirror is past it, the next one is exact
        exact = {TopicPartition(mirrored, p): (100, 100) for p in (0, 1)}
        wait_until(lambda: {c.topic_partition: (c.upstream_offset, c.downstream_offset)
                            for c in checkpointed()} == exact, timeout=30,
                   what="exact checkpoints of a group on the secured cluster")
    got = read_all(west.bootstrap, mirrored)
    for p in (0, 1):
        want = [r.content() for r in sent if r.partition == p]
        assert [r.content() for r in got if r.partition == p] == want

    syncs = read_syncs(secured.bootstrap, "mm2-offset-syncs.west.internal")
    ours = [s for s in syncs if s.topic_partition.topic == topic]
    assert {s.topic_partition.partition for s in ours} == {0, 1}
    positions = PositionStore(ClusterAdmin("west", west.bootstrap), "east").load()
    assert {tp.partition: p.source for tp, p in positions.items() if tp.topic == topic} == {0: 150, 1: 150}
    assert all(s.upstream_offset < 150 for s in ours)
    # every checkpoint written was behind or exact, never ahead
    assert all(c.downstream_offset <= 100 for c in checkpointed())
