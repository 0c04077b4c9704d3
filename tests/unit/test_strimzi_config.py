"""Strimzi ``KafkaMirrorMaker2`` resources read as flat MM2 configuration (mm2py/config/strimzi*.py):
resources in the shape of Strimzi's four examples and a v1beta2 one with SCRAM and TLS client
authentication, each compared with the mm2.properties it stands for; unknown fields, missing
Secrets and conflicting connector settings named by their resource path; the ignored fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mm2py.config.errors import ConfigError
from mm2py.config.loader import read_config
from mm2py.config.models import MirrorMakerConfig, load_config
from mm2py.config.security import cluster_security
from mm2py.config.strimzi import SECRETS_DIR_ENV, is_resource
from mm2py.config.strimzi_schema import IGNORED
from mm2py.config.strimzi_security import Secrets
from mm2py.kafka_local.security import TlsFiles, generate_tls_files

_STORAGE = {"groupId": "mirror-group", "configStorageTopic": "mirror-configs",
            "offsetStorageTopic": "mirror-offsets", "statusStorageTopic": "mirror-status"}


def resource(spec: dict[str, Any], api: str = "kafka.strimzi.io/v1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": "KafkaMirrorMaker2", "metadata": {"name": "dr"}, "spec": spec}


def v1_spec(target: dict[str, Any] | None = None, source: dict[str, Any] | None = None,
            **mirror: Any) -> dict[str, Any]:
    """A v1 spec mirroring ``east`` into ``west``; the mirror's fields from ``mirror``."""
    return {
        "version": "4.1.0", "replicas": 2,
        "target": {"alias": "west", "bootstrapServers": "west-kafka:9092", **_STORAGE,
                   "config": {"config.storage.replication.factor": 3,
                              "offset.storage.replication.factor": 3}, **(target or {})},
        "mirrors": [{"source": {"alias": "east", "bootstrapServers": "east-kafka:9092", **(source or {})},
                     **mirror}],
    }


def write(tmp_path: Path, doc: dict[str, Any], name: str = "mirror.yaml") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if name.endswith(".json") else yaml.safe_dump(doc))
    return path


def properties(tmp_path: Path, text: str) -> MirrorMakerConfig:
    path = tmp_path / "mm2.properties"
    path.write_text(text)
    return load_config(path)


def assert_same(config: MirrorMakerConfig, expected: MirrorMakerConfig) -> None:
    assert config.clusters == expected.clusters
    assert config.flows == expected.flows


def error(path: Path, secrets_dir: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, secrets_dir=secrets_dir)
    return str(info.value)


#: what every v1 resource below means besides its mirror's own keys
_V1_PROPERTIES = """
clusters = west, east
west.bootstrap.servers = west-kafka:9092
east.bootstrap.servers = east-kafka:9092
west.security.protocol = PLAINTEXT
east.security.protocol = PLAINTEXT
emit.heartbeats.enabled = false
east->west.enabled = true
east->west.emit.heartbeats.enabled = false
east->west.offset.storage.replication.factor = 3
"""


# ------------------------------------------------------------------ Strimzi's examples' shapes


def test_plain_resource_with_offset_syncs_on_the_target(tmp_path: Path) -> None:
    spec = v1_spec(
        sourceConnector={"tasksMax": 3, "config": {"replication.factor": -1,
                                                    "sync.topic.acls.enabled": "false",
                                                    "offset-syncs.topic.location": "target"}},
        checkpointConnector={"tasksMax": 1, "config": {"checkpoints.topic.replication.factor": -1,
                                                       "sync.group.offsets.enabled": False,
                                                       "offset-syncs.topic.location": "target"}},
        topicsPattern="orders.*|payments", groupsPattern=".*",
    )
    path = write(tmp_path, resource(spec))
    source = read_config(path)
    assert source.keys["east->west.tasks.max"] == 3
    assert source.keys["east->west.topics"] == "orders.*|payments"
    config = load_config(path)
    assert_same(config, properties(tmp_path, _V1_PROPERTIES + """
east->west.tasks.max = 3
east->west.topics = orders.*|payments
east->west.groups = .*
east->west.replication.factor = -1
east->west.sync.topic.acls.enabled = false
east->west.offset-syncs.topic.location = target
east->west.checkpoints.topic.replication.factor = -1
east->west.sync.group.offsets.enabled = false
"""))
    flow = config.flow("east", "west")
    assert flow.enabled and flow.offset_syncs_cluster == "west" and not flow.emit_heartbeats_enabled
    assert [f.name for f in config.heartbeat_flows()] == ["east->west"]  # west->east runs nothing
    assert not config.flow("west", "east").enabled


def test_tls_resource_with_trusted_certificates(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    tls = generate_tls_files(secrets / "cluster-ca", None)
    (secrets / "east-ca").mkdir()
    (secrets / "east-ca" / "ca.crt").write_text(tls.ca.read_text())
    (secrets / "east-ca" / "old.crt").write_text(tls.other_ca.read_text())
    (secrets / "east-ca" / "README").write_text("not a certificate")
    spec = v1_spec(
        target={"bootstrapServers": "west-kafka:9093",
                "tls": {"trustedCertificates": [{"secretName": "cluster-ca", "certificate": "ca.pem"}]}},
        source={"bootstrapServers": "east-kafka:9093",
                "tls": {"trustedCertificates": [{"secretName": "east-ca", "pattern": "*.crt"}]}},
        sourceConnector={"tasksMax": 2, "config": {"refresh.topics.interval.seconds": 300}},
        checkpointConnector={"config": {"sync.group.offsets.enabled": "false"}},
        topicsPattern="orders,payments", topicsExcludePattern="orders\\.internal",
    )
    path = write(tmp_path, resource(spec), "mirror.json")
    keys = read_config(path, secrets).keys
    assert keys["west.ssl.truststore.location"] == str(secrets / "cluster-ca" / "ca.pem")
    both = keys["east.ssl.truststore.certificates"]  # two files: inline, in name order
    assert both == tls.ca.read_text().strip() + "\n" + tls.other_ca.read_text().strip()
    config = load_config(path, secrets_dir=secrets)
    expected = properties(tmp_path, f"""
clusters = west, east
west.bootstrap.servers = west-kafka:9093
east.bootstrap.servers = east-kafka:9093
west.security.protocol = SSL
east.security.protocol = SSL
west.ssl.truststore.type = PEM
west.ssl.truststore.location = {secrets}/cluster-ca/ca.pem
east.ssl.truststore.type = PEM
emit.heartbeats.enabled = false
east->west.enabled = true
east->west.emit.heartbeats.enabled = false
east->west.offset.storage.replication.factor = 3
east->west.tasks.max = 2
east->west.refresh.topics.interval.seconds = 300
east->west.sync.group.offsets.enabled = false
east->west.topics = orders,payments
east->west.topics.exclude = orders\\\\.internal
""")
    east = expected.clusters["east"]
    east = east.model_copy(update={"connection": {**east.connection, "ssl.truststore.certificates": both}})
    assert config.clusters == {"west": expected.clusters["west"], "east": east}
    flow = expected.flows["east->west"].model_copy(update={"source_cluster": east})
    assert config.flows["east->west"] == flow
    assert config.flows["east->west"].topics_exclude == ("orders\\.internal",)
    security = cluster_security(config.flow("east", "west"), "target")  # the files are usable
    assert security.protocol == "SSL" and security.tls is not None


def test_sync_groups_resource(tmp_path: Path) -> None:
    spec = v1_spec(
        sourceConnector={"tasksMax": 1, "config": {"offset.lag.max": 100,
                                                    "refresh.topics.interval.seconds": 600}},
        checkpointConnector={"tasksMax": 1, "config": {"sync.group.offsets.enabled": "true",
                                                       "emit.checkpoints.interval.seconds": 30,
                                                       "sync.group.offsets.interval.seconds": 30}},
        groupsPattern="billing-.*", groupsExcludePattern="billing-test",
    )
    config = load_config(write(tmp_path, resource(spec)))
    assert_same(config, properties(tmp_path, _V1_PROPERTIES + """
east->west.tasks.max = 1
east->west.offset.lag.max = 100
east->west.refresh.topics.interval.seconds = 600
east->west.sync.group.offsets.enabled = true
east->west.emit.checkpoints.interval.seconds = 30
east->west.sync.group.offsets.interval.seconds = 30
east->west.groups = billing-.*
east->west.groups.exclude = billing-test
"""))
    flow = config.flow("east", "west")
    assert flow.sync_group_offsets_enabled and flow.emit_checkpoints_enabled


def test_custom_replication_policy_resource(tmp_path: Path) -> None:
    identity = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
    spec = v1_spec(
        sourceConnector={"config": {"replication.policy.class": identity,
                                    "sync.topic.acls.enabled": "false"}},
        checkpointConnector={"config": {"replication.policy.class": identity}},
        topicsPattern=".*",
    )
    config = load_config(write(tmp_path, resource(spec)))
    assert_same(config, properties(tmp_path, _V1_PROPERTIES + f"""
east->west.replication.policy.class = {identity}
east->west.sync.topic.acls.enabled = false
east->west.topics = .*
"""))
    assert config.flow("east", "west").replication_policy().format_remote_topic("east", "orders") == "orders"


def test_a_mirror_without_a_checkpoint_connector_emits_no_checkpoints(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, resource(v1_spec(sourceConnector={}))))
    flow = config.flow("east", "west")
    assert flow.enabled and not flow.emit_checkpoints_enabled and not flow.sync_group_offsets_enabled
    spec = v1_spec(sourceConnector={"config": {"sync.group.offsets.enabled": True}})
    message = error(write(tmp_path, resource(spec)))
    assert "spec.mirrors[0].sourceConnector.config.sync.group.offsets.enabled and spec.mirrors[0] " \
           "(no checkpointConnector) set 'east->west.sync.group.offsets.enabled' differently" in message


# ---------------------------------------------------------- v1beta2, secrets and authentication


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return generate_tls_files(tmp_path_factory.mktemp("tls"), None)


def secrets_dir(tmp_path: Path, tls: TlsFiles) -> Path:
    root = tmp_path / "secrets"
    for secret, key, text in (("west-cluster-ca-cert", "ca.crt", tls.ca.read_text()),
                              ("east-cluster-ca-cert", "ca.crt", tls.ca.read_text()),
                              ("mirror-user", "user.crt", tls.client_cert.read_text()),
                              ("mirror-user", "user.key", tls.client_key.read_text()),
                              ("east-scram", "password", 'pa"ss\\word\n')):
        (root / secret).mkdir(parents=True, exist_ok=True)
        (root / secret / key).write_text(text)
    return root


def v1beta2(**mirror: Any) -> dict[str, Any]:
    return resource({
        "version": "3.9.0", "replicas": 1, "connectCluster": "west",
        "clusters": [
            {"alias": "east", "bootstrapServers": "east-kafka:9094",
             "tls": {"trustedCertificates": [{"secretName": "east-cluster-ca-cert",
                                              "certificate": "ca.crt"}]},
             "authentication": {"type": "scram-sha-512", "username": "mirror",
                                "passwordSecret": {"secretName": "east-scram", "password": "password"}},
             "config": {"ssl.endpoint.identification.algorithm": "", "consumer.fetch.min.bytes": 1024}},
            {"alias": "west", "bootstrapServers": "west-kafka:9093",
             "tls": {"trustedCertificates": [{"secretName": "west-cluster-ca-cert",
                                              "certificate": "ca.crt"}]},
             "authentication": {"type": "tls", "certificateAndKey": {
                 "secretName": "mirror-user", "certificate": "user.crt", "key": "user.key"}},
             "config": {"config.storage.replication.factor": 3, "group.id": "mirror-connect",
                        "request.timeout.ms": 20000}},
            {"alias": "north", "bootstrapServers": "north-kafka:9092"},
        ],
        "mirrors": [{"sourceCluster": "east", "targetCluster": "west", "topicsPattern": "orders.*",
                     "topicsBlacklistPattern": "orders-tmp", "groupsBlacklistPattern": "test-.*",
                     "sourceConnector": {"tasksMax": 4, "config": {"consumer.max.poll.records": 1000}},
                     "heartbeatConnector": {"config": {"heartbeats.topic.replication.factor": 1}},
                     "checkpointConnector": {"config": {"emit.checkpoints.interval.seconds": 20},
                                             "autoRestart": {"enabled": True}},
                     **mirror}],
    }, api="kafka.strimzi.io/v1beta2")


def test_v1beta2_resource_with_scram_and_tls_client_authentication(tmp_path: Path, tls: TlsFiles) -> None:
    secrets = secrets_dir(tmp_path, tls)
    path = write(tmp_path, v1beta2())
    source = read_config(path, secrets)
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" '
            'password="pa\\"ss\\\\word";')
    assert source.keys == {
        "clusters": ["west", "east"],
        "west.bootstrap.servers": "west-kafka:9093",
        "west.ssl.truststore.type": "PEM",
        "west.ssl.truststore.location": str(secrets / "west-cluster-ca-cert" / "ca.crt"),
        "west.ssl.keystore.type": "PEM",
        "west.ssl.keystore.certificate.chain": tls.client_cert.read_text().strip(),
        "west.ssl.keystore.key": tls.client_key.read_text().strip(),
        "west.security.protocol": "SSL",
        "west.consumer.request.timeout.ms": 20000, "west.producer.request.timeout.ms": 20000,
        "west.admin.request.timeout.ms": 20000,
        "east.bootstrap.servers": "east-kafka:9094",
        "east.ssl.truststore.type": "PEM",
        "east.ssl.truststore.location": str(secrets / "east-cluster-ca-cert" / "ca.crt"),
        "east.sasl.mechanism": "SCRAM-SHA-512",
        "east.sasl.jaas.config": jaas,
        "east.security.protocol": "SASL_SSL",
        "east.ssl.endpoint.identification.algorithm": "",
        "east.consumer.fetch.min.bytes": 1024,
        "emit.heartbeats.enabled": False,
        "east->west.enabled": True,
        "east->west.topics": "orders.*",
        "east->west.topics.exclude": "orders-tmp",
        "east->west.groups.exclude": "test-.*",
        "east->west.tasks.max": 4,
        "east->west.consumer.max.poll.records": 1000,
        "east->west.emit.checkpoints.interval.seconds": 20,
        "east->west.heartbeats.topic.replication.factor": 1,
        "east->west.emit.heartbeats.enabled": True,
    }
    assert source.origins["east->west.tasks.max"] == "spec.mirrors[0].sourceConnector.tasksMax"
    config = load_config(path, secrets_dir=secrets)
    flow = config.flow("east", "west")
    assert flow.emit_heartbeats_enabled and flow.emit_checkpoints_enabled and flow.tasks_max == 4
    east = cluster_security(flow, "source", "consumer")
    assert (east.protocol, east.mechanism, east.username, east.password) == (
        "SASL_SSL", "SCRAM-SHA-512", "mirror", 'pa"ss\\word')
    assert east.tls is not None and not east.tls.check_hostname
    west = cluster_security(flow, "target", "producer")
    assert west.protocol == "SSL" and west.tls is not None and west.tls.cert_pem is not None
    assert west.security_config().ssl_context is not None  # certificate and key load
    assert "spec.clusters[2]: ignored: cluster 'north' is declared but no mirror uses it" in config.notes


def test_secrets_dir_from_the_environment(tmp_path: Path, tls: TlsFiles,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRETS_DIR_ENV, str(secrets_dir(tmp_path, tls)))
    assert load_config(write(tmp_path, v1beta2())).flow("east", "west").enabled


def test_a_missing_secret_names_the_field_and_the_file(tmp_path: Path, tls: TlsFiles) -> None:
    secrets = secrets_dir(tmp_path, tls)
    (secrets / "east-scram" / "password").unlink()
    message = error(write(tmp_path, v1beta2()), secrets)
    assert message.startswith("spec.clusters[0].authentication.passwordSecret: secret 'east-scram' has no "
                              f"key 'password': no file '{secrets / 'east-scram' / 'password'}'")


def test_oauth_and_custom_authentication(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    (secrets / "oauth").mkdir(parents=True)
    (secrets / "oauth" / "secret").write_text("s3cret\n")
    doc = resource({"connectCluster": "west", "clusters": [
        {"alias": "east", "bootstrapServers": "east:9092", "authentication": {
            "type": "oauth", "tokenEndpointUri": "https://idp/token", "clientId": "mirror",
            "clientSecret": {"secretName": "oauth", "key": "secret"}, "scope": "kafka", "audience": "kafka",
            "saslExtensions": {"logicalCluster": "lkc-1"}}},
        {"alias": "west", "bootstrapServers": "west:9092", "authentication": {
            "type": "custom", "sasl": True, "config": {
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                    'username="w" password="${strimzisecrets:ns/oauth:secret}";'}}}],
        "mirrors": [{"sourceCluster": "east", "sourceConnector": {}}]}, api="kafka.strimzi.io/v1beta2")
    config = load_config(write(tmp_path, doc), secrets_dir=secrets)
    flow = config.flow("east", "west")
    east = cluster_security(flow, "source")
    assert east.mechanism == "OAUTHBEARER" and east.oauth is not None
    oauth = east.oauth
    assert (oauth.token_endpoint_url, oauth.client_id, oauth.client_secret, oauth.scope) == (
        "https://idp/token", "mirror", "s3cret", "kafka")
    assert east.oauth.extensions == (("logicalCluster", "lkc-1"),)
    west = cluster_security(flow, "target")
    assert (west.protocol, west.mechanism, west.password) == ("SASL_PLAINTEXT", "PLAIN", "s3cret")
    assert any(n.startswith("spec.clusters[0].authentication.audience: ignored:") for n in config.notes)
    doc["spec"]["clusters"][0]["authentication"]["refreshToken"] = {"secretName": "oauth", "key": "secret"}
    assert "refresh-token grant" in error(write(tmp_path, doc), secrets)


# ------------------------------------------------------------------------------ errors, notes


def test_an_unknown_field_names_its_path(tmp_path: Path) -> None:
    spec = v1_spec(sourceConnector={}, topicPatern="orders")
    assert error(write(tmp_path, resource(spec))) == \
        "spec.mirrors[0].topicPatern: unknown field (did you mean 'topicsPattern'?)"
    spec = v1_spec(sourceConnector={"tasksMax": "four"})
    assert error(write(tmp_path, resource(spec))) == \
        "spec.mirrors[0].sourceConnector.tasksMax: expected integer, got a string 'four'"
    spec = v1_spec(sourceConnector={}, heartbeatConnector={})
    assert error(write(tmp_path, resource(spec))).startswith(
        "spec.mirrors[0].heartbeatConnector: not a field of kafka.strimzi.io/v1")
    spec = v1_spec(sourceConnector={"config": {"replication.factr": 3}})
    message = error(write(tmp_path, resource(spec)))
    assert message == ("spec.mirrors[0].sourceConnector.config.replication.factr: unknown key "
                       "'replication.factr' (did you mean 'replication.factor'?)")
    spec = v1_spec(sourceConnector={"config": {"tasks.max": 0}})
    assert error(write(tmp_path, resource(spec))).startswith(
        "spec.mirrors[0].sourceConnector.config.tasks.max: invalid value for 'east->west.tasks.max'")


def test_two_connectors_setting_a_key_differently_is_an_error(tmp_path: Path) -> None:
    spec = v1_spec(sourceConnector={"config": {"offset-syncs.topic.location": "target"}},
                   checkpointConnector={"config": {"offset-syncs.topic.location": "source"}})
    assert error(write(tmp_path, resource(spec))) == (
        "spec.mirrors[0].sourceConnector.config.offset-syncs.topic.location and "
        "spec.mirrors[0].checkpointConnector.config.offset-syncs.topic.location set "
        "'east->west.offset-syncs.topic.location' differently ('target' and 'source')")


def test_ignored_fields_are_listed_with_their_reasons(tmp_path: Path) -> None:
    spec = v1_spec(sourceConnector={"autoRestart": {"enabled": True}, "state": "paused",
                                    "config": {"key.converter": "ByteArrayConverter"}})
    spec.update(resources={"requests": {"cpu": "1"}}, logging={"type": "inline"}, template={"pod": {}},
                metricsConfig={"type": "jmxPrometheusExporter"}, rack={"topologyKey": "zone"})
    spec["target"]["config"]["plugin.discovery"] = "service_load"
    config = load_config(write(tmp_path, resource(spec)))
    notes = {n.split(": ignored: ")[0]: n for n in config.notes}
    for field in ("spec.version", "spec.replicas", "spec.resources", "spec.logging", "spec.template",
                  "spec.metricsConfig", "spec.rack", "spec.target.groupId", "spec.target.configStorageTopic",
                  "spec.target.offsetStorageTopic", "spec.target.statusStorageTopic",
                  "spec.target.config.config.storage.replication.factor",
                  "spec.target.config.plugin.discovery",
                  "spec.mirrors[0].sourceConnector.autoRestart",
                  "spec.mirrors[0].sourceConnector.config.key.converter"):
        assert field in notes and len(notes[field]) > len(field) + 20, field
    assert notes["spec.replicas"] == f"spec.replicas: ignored: {IGNORED['replicas']}"
    assert not config.flow("east", "west").enabled  # paused: nothing mirrored, as under Strimzi
    assert any(n.startswith("spec.mirrors[0].sourceConnector.state: paused") for n in config.notes)
    assert not config.ignored_keys


def test_other_documents_are_not_resources(tmp_path: Path) -> None:
    assert not is_resource({"kind": "KafkaMirrorMaker2", "apiVersion": "example.com/v1"})
    assert not is_resource({"clusters": "a, b"})
    flat = {"clusters": "east, west", "east.bootstrap.servers": "e:1", "west.bootstrap.servers": "w:1",
            "east->west.enabled": True}
    config = load_config(write(tmp_path, flat))
    assert config.flow("east", "west").enabled and config.notes == ()


def test_secret_placeholders_in_config_values(tmp_path: Path) -> None:
    secrets = Secrets(tmp_path)
    (tmp_path / "creds").mkdir()
    (tmp_path / "creds" / "password").write_text("p4ss\n")
    assert secrets.resolve('password="${strimzisecrets:prod/creds:password}";', "here") == 'password="p4ss";'
    assert secrets.resolve(7, "here") == 7
    with pytest.raises(ConfigError, match=r"^here: cannot resolve '\$\{file:/etc/x.properties:k\}'"):
        secrets.resolve("${file:/etc/x.properties:k}", "here")


def test_every_reason_is_a_sentence() -> None:
    assert all(len(reason) > 20 for reason in IGNORED.values())


def test_older_api_versions_have_v1beta2_fields(tmp_path: Path) -> None:
    doc = resource({"connectCluster": "west",
                    "clusters": [{"alias": "east", "bootstrapServers": "e:9092", "config": {
                                     "offset.storage.replication.factor": 1}},
                                 {"alias": "west", "bootstrapServers": "w:9092"}],
                    "mirrors": [{"sourceCluster": "east", "sourceConnector": {"config": {
                                     "sync.topic.acls.enabled": False}},
                                 "checkpointConnector": {"config": {"sync.topic.acls.enabled": "FALSE"}}}]},
                   api="kafka.strimzi.io/v1beta1")
    config = load_config(write(tmp_path, doc))  # False and "FALSE" are one value
    assert config.flow("east", "west").enabled and not config.flow("east", "west").sync_topic_acls_enabled
    assert any(n.startswith("spec.clusters[0].config.offset.storage.replication.factor: ignored:")
               for n in config.notes)
    doc["spec"]["mirrors"][0]["targetCluster"] = "wset"
    assert error(write(tmp_path, doc)) == \
        "spec.mirrors[0].targetCluster: no cluster 'wset' (did you mean 'west'?) (clusters: east, west)"
