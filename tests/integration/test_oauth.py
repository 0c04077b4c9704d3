"""SASL/OAUTHBEARER and KIP-368 re-authentication against real brokers.

The module starts an identity provider on loopback (:class:`LocalIdentityProvider`: a token
endpoint over HTTPS with a CA of its own, and a JWKS) and two one-node clusters, ``oauth-east`` and
``oauth-west``, whose SASL listeners (SASL_SSL and SASL_PLAINTEXT) take PLAIN and OAUTHBEARER
tokens signed by that provider (Kafka's ``OAuthBearerValidatorCallbackHandler`` reading the JWKS),
with ``connections.max.reauth.ms=8000``. Tokens last 8 s and a session is opened with a token that
has at least half of that left, so sessions last 4-8 s and every connection re-authenticates a
second or more before each ends; the tests wait for re-authentications to be counted, not for a
time. Kafka's unsecured tokens are tried on the
session's ``secured`` cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mm2py.client.cluster import ClientConfig, ClusterClient
from mm2py.client.connection import AuthenticationError, ConnectionConfig, ConnectionFactory
from mm2py.client.fetcher import FetcherConfig, RawFetcher
from mm2py.client.oauth import TokenError
from mm2py.client.producer import ProducerConfig, RawProducer
from mm2py.client.reauth import SASL_SESSIONS
from mm2py.config.security import parse_security
from mm2py.kafka_local import BrokerSecurity, KafkaCluster, start_all
from mm2py.kafka_local.cluster import in_parallel
from mm2py.kafka_local.security import broker_jvm_args
from mm2py.protocol.errors_codes import NONE
from mm2py.protocol.record_codec import Record, build_batch, decode_records
from mm2py.protocol.records import RecordBatch
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from mm2py.runtime.metrics import WorkerCollector
from tests.support.brokers import (
    BackgroundWorker,
    create_topic,
    make_records,
    mirror_config,
    produce_records,
    read_all,
    total,
    unique,
    wait_until,
)
from tests.support.live_producer import LiveProducer
from tests.support.oidc_provider import LocalIdentityProvider

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
CLIENT, SECRET = "mirror", "mirror-oidc-secret"
REAUTH_MS = 8_000  # mm2py re-authenticates at least 1 s before a session ends: a loaded machine keeps that


class OAuthSetup:
    def __init__(self, idp: LocalIdentityProvider, east: KafkaCluster, west: KafkaCluster,
                 trust: dict[str, Path]) -> None:
        self.idp, self.east, self.west, self.trusts = idp, east, west, trust
        self.trust = trust["east"]

    def oidc(self, *, secret: str = SECRET, trust: Path | None = None, url: str | None = None,
             side: str = "east") -> dict[str, str]:
        """A client's OAUTHBEARER settings in MM2/Java names (SASL_SSL; trust: the cluster's CA and the
        identity provider's)."""
        trust = trust or self.trusts[side]
        return {
            "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
            "sasl.login.callback.handler.class": HANDLER,
            "sasl.oauthbearer.token.endpoint.url": url or self.idp.token_url(),
            "sasl.jaas.config":
                f'{MODULE} required clientId="{CLIENT}" clientSecret="{secret}" scope="kafka";',
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(trust),
        }


@pytest.fixture(scope="module")
def oauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthSetup]:
    base = tmp_path_factory.mktemp("oauth")
    idp = LocalIdentityProvider(base / "idp", {CLIENT: SECRET}, token_lifetime_s=8).start()
    security = BrokerSecurity(listeners=("SASL_SSL", "SASL_PLAINTEXT"), oauth_jwks_url=idp.jwks_url(),
                              reauth_ms=REAUTH_MS, scram_users={})
    clusters = in_parallel(lambda n: KafkaCluster.create(n, base / n, security=security),
                           ["oauth-east", "oauth-west"])
    for cluster in clusters:
        cluster.jvm_args.extend(broker_jvm_args(security))
        for node in cluster.nodes:  # the broker's "Disconnecting expired channel" lines are DEBUG
            with (node.workdir / "log4j2.properties").open("a") as f:
                f.write("logger.processor.name = kafka.network.Processor\nlogger.processor.level = debug\n")
    try:
        start_all(clusters, timeout=120)
        east, west = clusters
        assert east.tls is not None and west.tls is not None
        # a cluster's CA and the identity provider's in one file, as a user would bundle them
        trust = {side: base / f"trust-{side}.pem" for side in ("east", "west")}
        for side, cluster in (("east", east), ("west", west)):
            assert cluster.tls is not None
            trust[side].write_bytes(cluster.tls.ca.read_bytes() + idp.ca_file.read_bytes())
        yield OAuthSetup(idp, east, west, trust)
    finally:
        for cluster in clusters:
            cluster.stop()
        idp.stop()


def raw_client(bootstrap: str, props: dict[str, str], alias: str) -> ClusterClient:
    security = parse_security(props, alias).security_config()
    return ClusterClient(bootstrap, ClientConfig(connection=ConnectionConfig(security=security)))


def test_raw_fetch_and_produce_with_oidc_client_credentials(oauth: OAuthSetup) -> None:
    east = oauth.east
    source = create_topic(east.bootstrap, unique("oidc-src"))
    target = create_topic(east.bootstrap, unique("oidc-dst"))
    sent = make_records(100, partition=0, tag="oidc")
    produce_records(east.bootstrap, source, sent)

    async def run() -> list[int]:
        async with raw_client(east.bootstrap_for("SASL_SSL"), oauth.oidc(), "oauth-east") as client:
            res = (await RawFetcher(client, FetcherConfig()).fetch({TopicPartition(source, 0): 0}))[
                TopicPartition(source, 0)]
            assert res.error_code == NONE
            batches = [RecordBatch(bytes(b)) for b in res.batches]
            assert [r.value for b in batches for r in decode_records(b)] == [r.value for r in sent]
            return await RawProducer(client, ProducerConfig(idempotent=True)).produce(
                [(TopicPartition(target, 0), b) for b in batches])

    assert asyncio.run(run())[0] == 0
    assert [r.content() for r in read_all(east.bootstrap, target, expect=100)] == [r.content() for r in sent]
    # the confluent-kafka clients of the same cluster: the same tokens through oauth_cb
    admin = ClusterAdmin("oauth-east", east.bootstrap_for("SASL_SSL"),
                         parse_security(oauth.oidc(), "oauth-east").librdkafka(), timeout=30)
    assert source in admin.list_topics()
    assert oauth.idp.issued[CLIENT] >= 1


def test_a_wrong_client_secret_fails_at_once_with_the_endpoints_reason(oauth: OAuthSetup) -> None:
    props = oauth.oidc(secret="not-the-secret")
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        asyncio.run(raw_client(oauth.east.bootstrap_for("SASL_SSL"), props, "oauth-east").__aenter__())
    message = str(info.value)
    assert "invalid_client" in message and "HTTP 401" in message and "cluster 'oauth-east'" in message
    assert "not-the-secret" not in message and "\n" not in message
    with pytest.raises(TokenError, match="invalid_client"):  # the confluent-kafka clients' settings
        parse_security(props, "oauth-east").librdkafka()
    assert time.monotonic() - started < 10

    # the token endpoint's certificate is verified with the cluster's trust settings
    assert oauth.east.tls is not None
    with pytest.raises(AuthenticationError, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(raw_client(oauth.east.bootstrap_for("SASL_SSL"), oauth.oidc(trust=oauth.east.tls.ca),
                               "oauth-east").__aenter__())
    # an endpoint nobody listens on
    with pytest.raises(AuthenticationError, match="cannot reach the token endpoint"):
        asyncio.run(raw_client(oauth.east.bootstrap_for("SASL_SSL"),
                               oauth.oidc(url="https://127.0.0.1:9/token"), "oauth-east").__aenter__())
    assert time.monotonic() - started < 20


def test_a_token_the_broker_refuses_fails_with_the_brokers_reason(oauth: OAuthSetup, tmp_path: Path) -> None:
    """A token signed by another key (here: Kafka's unsecured token) on a listener that checks signatures."""
    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
             "sasl.jaas.config": f'{MODULE} required unsecuredLoginStringClaim_sub="{CLIENT}";'}
    with pytest.raises(AuthenticationError) as info:
        asyncio.run(raw_client(oauth.east.bootstrap_for("SASL_PLAINTEXT"), props, "oauth-east").__aenter__())
    assert "SASL_AUTHENTICATION_FAILED" in str(info.value) and "invalid_token" in str(info.value)


async def test_unsecured_tokens_for_development(secured: KafkaCluster) -> None:
    topic = create_topic(secured.bootstrap, unique("unsecured"))
    produce_records(secured.bootstrap, topic, make_records(10, partition=0))
    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
             "sasl.jaas.config": f'{MODULE} required unsecuredLoginStringClaim_sub="alice";'}
    async with raw_client(secured.bootstrap_for("SASL_PLAINTEXT"), props, "secured") as client:
        tp = TopicPartition(topic, 0)
        res = (await RawFetcher(client, FetcherConfig()).fetch({tp: 0}))[tp]
        assert res.error_code == NONE and sum(RecordBatch(bytes(b)).records_count for b in res.batches) == 10
    admin = ClusterAdmin("secured", secured.bootstrap_for("SASL_PLAINTEXT"),
                         parse_security(props, "secured").librdkafka(), timeout=30)
    assert topic in await asyncio.to_thread(admin.list_topics)


@pytest.mark.parametrize("mechanism", ["OAUTHBEARER", "PLAIN"])
async def test_connections_reauthenticate_without_a_request_lost(
    oauth: OAuthSetup, mechanism: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A produce and fetch loop on the same connections until each re-authenticated twice."""
    east = oauth.east
    topic = create_topic(east.bootstrap, unique(f"reauth-{mechanism.lower()}"))
    alias = f"oauth-east-{mechanism.lower()}"
    props = oauth.oidc() if mechanism == "OAUTHBEARER" else {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(oauth.trust),
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="alice" password="alice-secret";'}
    opened: list[Any] = []
    connect = ConnectionFactory.connect

    async def counting(self: ConnectionFactory, *args: Any, **kwargs: Any) -> Any:
        conn = await connect(self, *args, **kwargs)
        opened.append(conn)
        return conn

    monkeypatch.setattr(ConnectionFactory, "connect", counting)
    tp = TopicPartition(topic, 0)
    before = SASL_SESSIONS.snapshot().get(alias)
    assert before is None
    async with raw_client(east.bootstrap_for("SASL_SSL"), props, alias) as client:
        producer = RawProducer(client, ProducerConfig(idempotent=True))
        fetcher = RawFetcher(client, FetcherConfig())
        position, produced, deadline = 0, 0, time.monotonic() + 90

        def sessions() -> Any:
            return SASL_SESSIONS.snapshot().get(alias)

        while (now := sessions()) is None or now.reauthentications < 4:  # two connections, twice each
            assert time.monotonic() < deadline, f"too few re-authentications in 90 s: {now}"
            batch = build_batch([Record(i, 0, b"k", f"v{produced + i}".encode()) for i in range(5)],
                                base_timestamp=int(time.time() * 1000))
            await producer.produce([(tp, RecordBatch(bytes(batch)))])
            produced += 5
            res = (await fetcher.fetch({tp: position}))[tp]
            assert res.error_code == NONE
            position = res.next_offset
            await asyncio.sleep(0.05)
        assert all(c.connected for c in opened) and len(opened) == 2  # bootstrap + the broker
    assert position == produced
    counts = SASL_SESSIONS.snapshot()[alias]
    assert counts.reauthentications >= 4, counts  # two connections, two sessions or more each
    assert counts.reauthentication_failures == 0 and counts.expired_closes == 0


class _Api:
    """A worker with the REST API on its loop."""

    def __init__(self, config: Any) -> None:
        self.bg = BackgroundWorker(config)
        self.server: Any = None

    def __enter__(self) -> httpx.Client:
        from mm2py.rest_api.server import RestServer

        self.bg.__enter__()

        async def start() -> Any:
            server = RestServer(self.bg.worker, "127.0.0.1", 0)
            await server.start()
            return server

        self.server = self.bg.call(start)
        self.http = httpx.Client(base_url=self.server.url, timeout=120)
        return self.http

    def __exit__(self, *exc: object) -> None:
        self.http.close()
        self.bg.call(self.server.stop)
        self.bg.stop()


def test_rest_create_with_a_wrong_secret_answers_the_endpoints_reason(oauth: OAuthSetup) -> None:
    config = mirror_config({"west": oauth.west.bootstrap}, {})
    bad = oauth.oidc(secret="wrong-secret")
    with _Api(config) as api:
        started = time.monotonic()
        r = api.post("/flows", json={"source": "oe", "target": "west", "clusters": {
            "oe": {"bootstrap.servers": oauth.east.bootstrap_for("SASL_SSL"), **bad}}})
        assert r.status_code == 401, r.text
        assert "invalid_client" in r.json()["error"] and "wrong-secret" not in r.text
        assert time.monotonic() - started < 10
        good = {"bootstrap.servers": oauth.east.bootstrap_for("SASL_SSL"), **oauth.oidc()}
        r = api.post("/flows", json={"source": "oe2", "target": "west", "topics": ["nothing-here"],
                                     "clusters": {"oe2": good}})
        assert r.status_code == 201, r.text
        shown = api.get("/flows/oe2/west/config").text + api.get("/flows/oe2/west").text
        assert SECRET not in shown


def _flow_security(alias: str, props: dict[str, str]) -> dict[str, str]:
    return {f"{alias}.{k}": v for k, v in props.items()}


def test_mirror_flows_over_oauthbearer_and_plain_across_reauthentications(oauth: OAuthSetup) -> None:
    """Two flows under live traffic until every cluster's connections re-authenticated six times
    and three tokens were taken: one between the clusters' OAUTHBEARER listeners (signed 8 s
    tokens), one between their PLAIN listeners."""
    east, west = oauth.east, oauth.west
    plain = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                 'username="alice" password="alice-secret";'}
    topics = {"oe": create_topic(east.bootstrap, unique("flow-oidc"), partitions=2),
              "pe": create_topic(east.bootstrap, unique("flow-plain"), partitions=2)}
    config = mirror_config(
        {"oe": east.bootstrap_for("SASL_SSL"), "ow": west.bootstrap_for("SASL_SSL"),
         "pe": east.bootstrap_for("SASL_PLAINTEXT"), "pw": west.bootstrap_for("SASL_PLAINTEXT")},
        {"oe->ow": {"topics": topics["oe"]}, "pe->pw": {"topics": topics["pe"]}},
        **_flow_security("oe", oauth.oidc()), **_flow_security("ow", oauth.oidc(side="west")),
        **_flow_security("pe", plain), **_flow_security("pw", plain),
        **{"emit.checkpoints.enabled": False},
    )
    producers = {alias: LiveProducer(east.bootstrap, topic, 2, per_tick=10)
                 for alias, topic in topics.items()}
    with BackgroundWorker(config) as bg:
        for p in producers.values():
            p.__enter__()

        def samples() -> dict[tuple[str, str | None], float]:
            return {(s.name, s.labels.get("cluster") or s.labels.get("flow")): s.value
                    for family in WorkerCollector(bg.worker).collect() for s in family.samples}

        def reauthenticated() -> bool:
            now = samples()
            return (all(now.get(("mm2py_sasl_reauthentications_total", c), 0) >= 6
                        for c in ("oe", "ow", "pe", "pw"))
                    and now.get(("mm2py_oauth_tokens_total", "oe"), 0) >= 3)

        wait_until(reauthenticated, 180, 0.5, "six re-authentications on every cluster, three tokens")
        produced = {alias: p.stop() for alias, p in producers.items()}
        mirrored = {alias: f"{alias}.{topic}" for alias, topic in topics.items()}

        def caught_up() -> bool:
            return all(total(west.bootstrap, mirrored[a]) >= produced[a] for a in topics)

        wait_until(caught_up, timeout=60, what="both flows caught up")
        seen = samples()
    for alias in topics:
        got = read_all(west.bootstrap, mirrored[alias], expect=produced[alias])
        for partition in (0, 1):
            values = [r.value for r in got if r.partition == partition]
            assert values == [f"live-{i}".encode() for i in range(partition, produced[alias], 2)], alias
    for cluster in ("oe", "ow", "pe", "pw"):
        assert seen[("mm2py_sasl_reauthentications_total", cluster)] >= 6, (cluster, seen)
        assert seen[("mm2py_sasl_reauthentication_failures_total", cluster)] == 0
        assert seen[("mm2py_sasl_expired_closes_total", cluster)] == 0
    for flow in ("oe->ow", "pe->pw"):
        assert seen[("mm2py_task_sink_failures_total", flow)] == 0, seen
        assert seen[("mm2py_task_restarts_total", flow)] == 0, seen
    for cluster in (east, west):
        log = "".join(p.read_text(errors="replace") for p in cluster.log_files)
        # mm2py's own connections (client id mm2py) never outlive their session. librdkafka's (the
        # admin clients) start re-authenticating at 90% of it, which a loaded machine can miss: the
        # broker then closes that connection and librdkafka opens another; nothing is lost by it
        expired = [line for line in log.splitlines()
                   if "Disconnecting expired channel" in line and "clientId=rdkafka" not in line]
        assert not expired, expired[:3]
