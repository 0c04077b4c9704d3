"""Strimzi ``KafkaMirrorMaker2`` resources run as they are (issue 49, "Coming from Strimzi"), on real
brokers, each in the shape of one of Strimzi's example resources (``packaging/examples/mirror-maker``),
its Secrets in a directory laid out as Kubernetes mounts them: a plain resource; TLS with the
cluster CA and SCRAM-SHA-512 (run by the ``mm2py run -c ... --secrets-dir`` command); mutual TLS
with a KafkaUser's certificate and key; synced consumer groups; the identity replication policy and a
custom separator. Every test checks that the mirror is exact: every record once, in order, in each
partition.

Sources and targets: ``east``/``west`` (plaintext) and ``secured`` (SASL_SSL with SCRAM users, SSL
requiring a client certificate; its PLAINTEXT listener is for set-up and checks).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer

from mm2py.config.models import load_config
from mm2py.kafka_local import KafkaCluster
from mm2py.protocol.mm2_records import Checkpoint
from mm2py.protocol.types import TopicPartition
from mm2py.rdkafka.admin import ClusterAdmin
from tests.support.brokers import (
    SASL_USERS,
    BackgroundWorker,
    by_partition,
    consume_and_commit,
    create_topic,
    make_records,
    produce_records,
    read_all,
    topic_names,
    total,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

#: how long a resource's flow may take to mirror its records, the worker's start included: measured
#: here at most 3.7 s (the mutual TLS test; 3.2 s for the ``mm2py run`` command, its start and
#: imports included), bounded at ten times that for a machine busy with other tests
MIRRORED_S = 40
#: how long the synced group may take to reach the target once mirrored: measured 0.02 s (the live
#: sync), else one round of the periodic sync at the resource's 1 s intervals; the bound of
#: test_live_group_sync for a loaded machine
SYNCED_S = 10
#: Strimzi's example resources leave replication factors to the broker (-1: its default)
BROKER_DEFAULT = -1
#: the Connect storage topics' factors, left to the broker (what each resource's clusters carry)
CONNECT_STORAGE = {"config.storage.replication.factor": BROKER_DEFAULT,
                   "offset.storage.replication.factor": BROKER_DEFAULT,
                   "status.storage.replication.factor": BROKER_DEFAULT}
#: the sourceConnector config the resources share (factors left to the broker, ACL sync off)
SOURCE_CONFIG = {"replication.factor": BROKER_DEFAULT,
                 "offset-syncs.topic.replication.factor": BROKER_DEFAULT,
                 "sync.topic.acls.enabled": "false"}


def mount_secret(root: Path, name: str, data: Mapping[str, str | bytes]) -> Path:
    """Secret ``name`` as the kubelet mounts it under ``root``: the keys' files in a timestamped
    hidden directory, ``..data`` a link to it, and each key a link to ``..data/<key>``."""
    folder = root / name
    stamp = folder / time.strftime("..%Y_%m_%d_%H_%M_%S.000000001", time.gmtime())
    stamp.mkdir(parents=True)
    for key, value in data.items():
        (stamp / key).write_bytes(value if isinstance(value, bytes) else value.encode())
        (stamp / key).chmod(0o644)
    (folder / "..data").symlink_to(stamp.name)
    for key in data:
        (folder / key).symlink_to(Path("..data") / key)
    return folder


def cluster_ca_secret(root: Path, cluster: KafkaCluster, name: str) -> None:
    """The Secret ``<name>-cluster-ca-cert`` Strimzi's operator makes for a Kafka cluster's CA."""
    assert cluster.tls is not None
    mount_secret(root, f"{name}-cluster-ca-cert", {"ca.crt": cluster.tls.ca.read_bytes(),
                                                   "ca.password": "not-read-by-a-pem-trust-store"})


def write_resource(path: Path, resource: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(resource), sort_keys=False))
    return path


def assert_exact(source: str, target: str, topic: str, remote: str) -> None:
    """Every record of ``topic`` on ``source`` once, in order, in the same partition of ``remote``
    on ``target`` (both read to their end, committed records only: a duplicate, a gap, an aborted
    record or a record out of place shows)."""
    assert by_partition(read_all(target, remote)) == by_partition(read_all(source, topic))


def seeded_topic(bootstrap: str, prefix: str) -> tuple[str, list[Any]]:
    """A two-partition topic with 300 and 200 records (keys, headers, null values and keys)."""
    topic = create_topic(bootstrap, f"{prefix}-orders", partitions=2)
    records = [*make_records(300, partition=0, tag="a"), *make_records(200, partition=1, tag="b")]
    produce_records(bootstrap, topic, records)
    return topic, records


def test_a_plain_resource_mirrors_its_topics(east: KafkaCluster, west: KafkaCluster, tmp_path: Path) -> None:
    prefix = unique("strimzi")
    kept, records = seeded_topic(east.bootstrap, prefix)
    left = create_topic(east.bootstrap, f"{prefix}-scratch")
    produce_records(east.bootstrap, left, make_records(10))
    single_node = {"replication.factor": 1, "offset-syncs.topic.replication.factor": 1}
    resource = {
        "apiVersion": "kafka.strimzi.io/v1", "kind": "KafkaMirrorMaker2", "metadata": {"name": "it"},
        "spec": {
            "version": "4.1.0", "replicas": 1,
            "target": {"alias": "west", "bootstrapServers": west.bootstrap, "groupId": "it",
                       "configStorageTopic": "it-configs", "offsetStorageTopic": "it-offsets",
                       "statusStorageTopic": "it-status",
                       "config": {"offset.storage.replication.factor": 1}},
            "mirrors": [{
                "source": {"alias": "east", "bootstrapServers": east.bootstrap},
                "sourceConnector": {"tasksMax": 2,
                                    "config": {**single_node, "sync.topic.acls.enabled": False}},
                "checkpointConnector": {"config": {"checkpoints.topic.replication.factor": 1}},
                "topicsPattern": f"{prefix}-.*", "topicsExcludePattern": f"{prefix}-scratch",
            }],
        },
    }
    config = load_config(write_resource(tmp_path / "mirror.yaml", resource))
    assert [f.name for f in config.enabled_flows()] == ["east->west"]
    with BackgroundWorker(config, all_started=True):
        wait_until(lambda: total(west.bootstrap, f"east.{kept}") == 500, MIRRORED_S, 0.5, "mirrored")
    mirrored = read_all(west.bootstrap, f"east.{kept}", expect=500)
    assert by_partition(mirrored) == by_partition(records)
    assert f"east.{left}" not in topic_names(west.bootstrap)


# -- TLS and SCRAM-SHA-512, by the mm2py command ------------------------------------------------------
@contextlib.contextmanager
def mm2py_run(config: Path, secrets: Path, log: Path) -> Iterator[Callable[[], None]]:
    """``mm2py run -c <config> --secrets-dir <secrets>`` as a subprocess; yields a check that fails
    the test at once, with what the command printed, if it has exited. Stopped by SIGTERM (a clean
    stop) on the way out, killed if it does not end."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "mm2py", "run", "-c", str(config), "--secrets-dir",
                                 str(secrets), "--log-level", "info"], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def running() -> None:
        if proc.poll() is not None:
            raise AssertionError(f"mm2py run exited with {proc.returncode}:\n{log.read_text()[-4000:]}")

    try:
        yield running
        running()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def test_tls_and_scram_sha_512_from_mounted_secrets(
    secured: KafkaCluster, west: KafkaCluster, tmp_path: Path
) -> None:
    """kafka-mirror-maker-2-tls.yaml's shape (v1), the source authenticated by SCRAM-SHA-512: the
    source's CA from the cluster CA Secret (by a pattern, as Strimzi's examples do), the password
    from the KafkaUser's Secret."""
    prefix = unique("strimzi-scram")
    topic, records = seeded_topic(secured.bootstrap, prefix)
    secrets = tmp_path / "secrets"
    cluster_ca_secret(secrets, secured, "secured")
    mount_secret(secrets, "alice", {"password": SASL_USERS["alice"],
                                    "sasl.jaas.config": "written by the operator; not read"})
    resource = {
        "apiVersion": "kafka.strimzi.io/v1", "kind": "KafkaMirrorMaker2", "metadata": {"name": "scram"},
        "spec": {
            "version": "4.1.0", "replicas": 1,
            "target": {"alias": "west", "bootstrapServers": west.bootstrap, "groupId": "scram-group",
                       "configStorageTopic": "scram-configs", "offsetStorageTopic": "scram-offsets",
                       "statusStorageTopic": "scram-status",
                       "config": {**CONNECT_STORAGE}},
            "mirrors": [{
                "source": {
                    "alias": "secured", "bootstrapServers": secured.bootstrap_for("SASL_SSL"),
                    "tls": {"trustedCertificates": [{"secretName": "secured-cluster-ca-cert",
                                                     "pattern": "*.crt"}]},
                    "authentication": {"type": "scram-sha-512", "username": "alice",
                                       "passwordSecret": {"secretName": "alice", "password": "password"}},
                },
                "sourceConnector": {"tasksMax": 2, "config": {**SOURCE_CONFIG}},
                "checkpointConnector": {"tasksMax": 1, "config": {
                    "checkpoints.topic.replication.factor": BROKER_DEFAULT}},
                "topicsPattern": f"{prefix}-.*", "groupsPattern": ".*",
            }],
        },
    }
    path = write_resource(tmp_path / "kafka-mirror-maker-2-scram.yaml", resource)
    # what the command will run: SASL_SSL with the mounted CA and the Secret's password
    source = load_config(path, secrets_dir=secrets).clusters["secured"].connection
    assert source["security.protocol"] == "SASL_SSL" and source["sasl.mechanism"] == "SCRAM-SHA-512"
    assert source["ssl.truststore.location"] == str(secrets / "secured-cluster-ca-cert" / "ca.crt")
    assert f'password="{SASL_USERS["alice"]}"' in source["sasl.jaas.config"]
    remote = f"secured.{topic}"
    with mm2py_run(path, secrets, tmp_path / "mm2py-run.log") as running:
        def mirrored() -> bool:
            running()
            return total(west.bootstrap, remote) == len(records)

        wait_until(mirrored, MIRRORED_S, 0.2, f"{remote} mirrored by mm2py run")
    assert_exact(secured.bootstrap, west.bootstrap, topic, remote)


# -- mutual TLS -------------------------------------------------------------------------------------
def user_key_pem(cluster: KafkaCluster) -> bytes:
    """The secured cluster's client key as a KafkaUser Secret's ``user.key`` holds it: PKCS#8 PEM,
    not encrypted (the harness writes it encrypted, for the tests of ``ssl.key.password``)."""
    from cryptography.hazmat.primitives import serialization

    assert cluster.tls is not None
    key = serialization.load_pem_private_key(cluster.tls.client_key.read_bytes(), b"client-key-secret")
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def test_mutual_tls_with_a_kafka_user_certificate(
    east: KafkaCluster, secured: KafkaCluster, tmp_path: Path
) -> None:
    """kafka-mirror-maker-2-tls.yaml's shape (v1beta2: ``clusters`` and ``connectCluster``) into the
    secured cluster's SSL listener, which requires a client certificate: authentication ``tls`` with
    the KafkaUser Secret's ``user.crt`` and ``user.key``; producer, admin, progress and checkpoints
    all over mutual TLS."""
    assert secured.tls is not None
    prefix = unique("strimzi-mtls")
    topic, records = seeded_topic(east.bootstrap, prefix)
    secrets = tmp_path / "secrets"
    cluster_ca_secret(secrets, secured, "secured")
    mount_secret(secrets, "mirror-user", {"ca.crt": secured.tls.ca.read_bytes(),
                                          "user.crt": secured.tls.client_cert.read_bytes(),
                                          "user.key": user_key_pem(secured)})
    resource = {
        "apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaMirrorMaker2", "metadata": {"name": "mtls"},
        "spec": {
            "version": "4.1.0", "replicas": 1, "connectCluster": "secured",
            "clusters": [
                {"alias": "east", "bootstrapServers": east.bootstrap},
                {"alias": "secured", "bootstrapServers": secured.bootstrap_for("SSL"),
                 "tls": {"trustedCertificates": [{"secretName": "secured-cluster-ca-cert",
                                                  "certificate": "ca.crt"}]},
                 "authentication": {"type": "tls", "certificateAndKey": {
                     "secretName": "mirror-user", "certificate": "user.crt", "key": "user.key"}},
                 "config": {**CONNECT_STORAGE}},
            ],
            "mirrors": [{
                "sourceCluster": "east", "targetCluster": "secured",
                "sourceConnector": {"tasksMax": 2, "config": {**SOURCE_CONFIG}},
                "checkpointConnector": {"tasksMax": 1, "config": {
                    "checkpoints.topic.replication.factor": BROKER_DEFAULT}},
                "topicsPattern": f"{prefix}-.*", "groupsPattern": ".*",
            }],
        },
    }
    config = load_config(write_resource(tmp_path / "kafka-mirror-maker-2-tls.yaml", resource), secrets)
    target = config.clusters["secured"].connection
    assert target["security.protocol"] == "SSL" and target["ssl.keystore.type"] == "PEM"
    assert target["ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")
    remote = f"east.{topic}"
    with BackgroundWorker(config, all_started=True):
        wait_until(lambda: total(secured.bootstrap, remote) == len(records), MIRRORED_S, 0.2,
                   f"{remote} mirrored")
    assert_exact(east.bootstrap, secured.bootstrap, topic, remote)


# -- synced consumer groups -------------------------------------------------------------------------
def transactional_topic(bootstrap: str, prefix: str) -> str:
    """Two partitions of plain records and committed and aborted transactions: the transaction
    markers and aborted records make source and target offsets differ."""
    topic = create_topic(bootstrap, f"{prefix}-payments", partitions=2)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx"), "linger.ms": 5})
    tx.init_transactions(30)
    for r in range(4):
        for p in range(2):
            for i in range(6):
                plain.produce(topic, f"plain-{r}-{p}-{i}".encode(), f"k{p}-{r}-{i}".encode(), partition=p)
        plain.flush(30)
        tx.begin_transaction()
        for p in range(2):
            for i in range(4):
                tx.produce(topic, f"tx-{r}-{p}-{i}".encode(), f"t{p}-{r}-{i}".encode(), partition=p)
        tx.flush(30)  # on the broker before an abort (librdkafka drops what it still holds)
        if r % 2:
            tx.abort_transaction(30)
        else:
            tx.commit_transaction(30)
    return topic


def translated(source: str, target: str, topic: str, remote: str, committed: dict[int, int]
               ) -> dict[int, int]:
    """Where, on the target, the first record each committed source offset points at landed (found
    by content): the exact translation of the group's offsets."""
    records = read_all(source, topic)
    where = {(r.partition, r.value): r.offset for r in read_all(target, remote)}
    return {p: where[(p, next(r for r in records if r.partition == p and r.offset >= u).value)]
            for p, u in committed.items()}


def test_sync_groups_translates_committed_offsets_exactly(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path
) -> None:
    """kafka-mirror-maker-2-sync-groups.yaml's shape (v1beta2): ``sync.group.offsets.enabled`` in the
    checkpoint connector's config. A group ``groupsPattern`` matches gets, on the target, exactly
    the translated offsets of its source commits; a group it does not match gets none, and no
    checkpoint."""
    prefix = unique("strimzi-groups")
    topic = transactional_topic(east.bootstrap, prefix)
    synced, other = f"{prefix}-synced", f"{prefix}-other"
    committed = consume_and_commit(east.bootstrap, synced, topic, {0: 17, 1: 9})
    consume_and_commit(east.bootstrap, other, topic, {0: 5, 1: 5})
    resource = {
        "apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaMirrorMaker2", "metadata": {"name": "groups"},
        "spec": {
            "version": "4.1.0", "replicas": 1, "connectCluster": "west",
            "clusters": [
                {"alias": "east", "bootstrapServers": east.bootstrap},
                {"alias": "west", "bootstrapServers": west.bootstrap,
                 "config": {**CONNECT_STORAGE}},
            ],
            "mirrors": [{
                "sourceCluster": "east", "targetCluster": "west",
                "sourceConnector": {"tasksMax": 1, "config": {**SOURCE_CONFIG}},
                "checkpointConnector": {"tasksMax": 1, "config": {
                    "checkpoints.topic.replication.factor": BROKER_DEFAULT,
                    "sync.group.offsets.enabled": "true",
                    # one second instead of a minute: the test waits for one round, not the defaults
                    "emit.checkpoints.interval.seconds": 1, "sync.group.offsets.interval.seconds": 1,
                    "refresh.groups.interval.seconds": 1}},
                "topicsPattern": topic, "groupsPattern": f"{prefix}-synced.*",
            }],
        },
    }
    config = load_config(write_resource(tmp_path / "kafka-mirror-maker-2-sync-groups.yaml", resource))
    flow = config.flows["east->west"]
    assert flow.sync_group_offsets_enabled and flow.emit_checkpoints_enabled
    remote = f"east.{topic}"
    source_records = len(read_all(east.bootstrap, topic))

    def mirrored() -> bool:  # offsets differ (markers): counted by the records a reader gets
        return total(west.bootstrap, remote) > 0 and len(read_all(west.bootstrap, remote)) == source_records

    def target_group(group: str) -> dict[int, int]:
        got = ClusterAdmin("west", west.bootstrap).group_offsets([group])[group]
        assert all(tp.topic == remote for tp in got), got
        return {tp.partition: o.offset for tp, o in got.items()}

    with BackgroundWorker(config, all_started=True):
        wait_until(mirrored, MIRRORED_S, 0.5, f"{remote} mirrored")
        expected = translated(east.bootstrap, west.bootstrap, topic, remote, committed)
        wait_until(lambda: target_group(synced) == expected, SYNCED_S, 0.2,
                   f"{synced} at its translated offsets")
    assert expected != committed, "transaction markers should make source and target offsets differ"
    assert target_group(other) == {}
    checkpoints = [Checkpoint.from_record(r.key, r.value)
                   for r in read_all(west.bootstrap, flow.checkpoints_topic())]
    mine = [cp for cp in checkpoints if cp.group in (synced, other)]
    assert {cp.group for cp in mine} == {synced}
    latest = {cp.topic_partition: cp.downstream_offset for cp in mine}
    assert latest == {TopicPartition(remote, p): o for p, o in expected.items()}
    assert_exact(east.bootstrap, west.bootstrap, topic, remote)


# -- replication policies ---------------------------------------------------------------------------
def policy_resource(east: KafkaCluster, west: KafkaCluster, prefix: str, policy: Mapping[str, Any]
                    ) -> dict[str, Any]:
    """kafka-mirror-maker-2-custom-replication-policy.yaml's shape (v1): the policy's keys in both
    connectors' config, as Strimzi's example sets them."""
    return {
        "apiVersion": "kafka.strimzi.io/v1", "kind": "KafkaMirrorMaker2", "metadata": {"name": "policy"},
        "spec": {
            "version": "4.1.0", "replicas": 1,
            "target": {"alias": "west", "bootstrapServers": west.bootstrap, "groupId": "policy-group",
                       "configStorageTopic": "policy-config", "offsetStorageTopic": "policy-offset",
                       "statusStorageTopic": "policy-status",
                       "config": {**CONNECT_STORAGE}},
            "mirrors": [{
                "source": {"alias": "east", "bootstrapServers": east.bootstrap},
                "sourceConnector": {"tasksMax": 2, "config": {
                    "replication.factor": BROKER_DEFAULT,
                    "offset-syncs.topic.replication.factor": BROKER_DEFAULT,
                    "sync.topic.acls.enabled": "false", **policy}},
                "checkpointConnector": {"tasksMax": 1, "config": {
                    "checkpoints.topic.replication.factor": BROKER_DEFAULT,
                    "sync.group.offsets.enabled": "false", **policy}},
                "topicsPattern": f"{prefix}-.*", "groupsPattern": ".*",
            }],
        },
    }


def test_identity_replication_policy_keeps_topic_names(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path
) -> None:
    prefix = unique("strimzi-identity")
    topic, _ = seeded_topic(east.bootstrap, prefix)
    policy = {"replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"}
    path = write_resource(tmp_path / "kafka-mirror-maker-2-custom-replication-policy.yaml",
                          policy_resource(east, west, prefix, policy))
    config = load_config(path)
    assert config.flows["east->west"].replication_policy().format_remote_topic("east", topic) == topic
    with BackgroundWorker(config, all_started=True):
        wait_until(lambda: total(west.bootstrap, topic) == 500, MIRRORED_S, 0.2,
                   f"{topic} mirrored as itself")
    assert_exact(east.bootstrap, west.bootstrap, topic, topic)
    assert f"east.{topic}" not in topic_names(west.bootstrap)


def test_a_custom_separator_names_remote_topics(
    east: KafkaCluster, west: KafkaCluster, tmp_path: Path
) -> None:
    """``replication.policy.separator: _``: the remote topic is ``east_<topic>``. The internal topics
    keep MM2's ``.`` names (``replication.policy.internal.topic.separator.enabled: false``): on
    these clusters, shared by every test, ``east_checkpoints_internal`` or
    ``mm2-offset-syncs_west_internal`` would be topics no other flow's default exclusions
    (``.*[-.]internal``) keep out of its mirror."""
    prefix = unique("strimzi-separator")
    topic, _ = seeded_topic(east.bootstrap, prefix)
    policy = {"replication.policy.separator": "_",
              "replication.policy.internal.topic.separator.enabled": "false"}
    path = write_resource(tmp_path / "kafka-mirror-maker-2-separator.yaml",
                          policy_resource(east, west, prefix, policy))
    flow = load_config(path).flows["east->west"]
    assert flow.checkpoints_topic() == "east.checkpoints.internal"
    assert flow.offset_syncs_topic() == "mm2-offset-syncs.west.internal"
    remote = f"east_{topic}"
    with BackgroundWorker(load_config(path), all_started=True):
        wait_until(lambda: total(west.bootstrap, remote) == 500, MIRRORED_S, 0.2, f"{remote} mirrored")
    assert_exact(east.bootstrap, west.bootstrap, topic, remote)
    assert f"east.{topic}" not in topic_names(west.bootstrap)
    assert "east_checkpoints_internal" not in topic_names(west.bootstrap)
    assert "mm2-offset-syncs_west_internal" not in topic_names(east.bootstrap)
