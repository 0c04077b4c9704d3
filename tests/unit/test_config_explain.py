"""``mm2py config explain``: a Strimzi resource printed as the mm2.properties it amounts to, which
loads back into the same flows; credentials hidden; what is left aside listed with its reason."""

from __future__ import annotations

import io
import json
from pathlib import Path

from mm2py.cli import main
from mm2py.cli.config import explain
from mm2py.config.models import load_config

ROOT = Path(__file__).resolve().parents[2]

RESOURCE = {
    "apiVersion": "kafka.strimzi.io/v1", "kind": "KafkaMirrorMaker2", "metadata": {"name": "m"},
    "spec": {
        "version": "4.1.1", "replicas": 2,
        "target": {"alias": "west", "bootstrapServers": "west:9092", "groupId": "g",
                   "configStorageTopic": "c", "offsetStorageTopic": "o", "statusStorageTopic": "s"},
        "mirrors": [{
            "source": {"alias": "east", "bootstrapServers": "east:9092",
                       "authentication": {
                           "type": "scram-sha-512", "username": "mirror",
                           "passwordSecret": {"secretName": "east-user", "password": "password"}}},
            "sourceConnector": {"tasksMax": 3, "config": {"replication.policy.class":
                                                         "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"}},
            "checkpointConnector": {"config": {"sync.group.offsets.enabled": "true"}},
            "topicsPattern": "orders.*", "topicsExcludePattern": "orders-tmp", "groupsPattern": ".*",
        }],
    },
}


def test_a_resource_explained_loads_back_as_the_same_flows_with_its_secret_hidden(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    (secrets / "east-user").mkdir(parents=True)
    (secrets / "east-user" / "password").write_text("s3cret-pw")
    resource = tmp_path / "mirror.json"
    resource.write_text(json.dumps(RESOURCE))
    out = io.StringIO()
    assert explain(str(resource), str(secrets), out) == 0
    text = out.getvalue()
    assert "s3cret-pw" not in text and "east.sasl.jaas.config = [hidden]" in text
    lines = text.splitlines()
    assert "east->west.tasks.max = 3" in lines and "east->west.topics = orders.*" in lines
    assert "east->west.topics.exclude = orders-tmp" in lines
    assert "east.sasl.mechanism = SCRAM-SHA-512" in lines
    assert "# flows enabled: east->west" in lines
    assert any(line.startswith("#   spec.replicas: ignored: ") for line in lines)
    # the printed keys are an mm2.properties that loads (the hidden password put back) into the
    # resource's configuration: the same flows, the same settings
    first = load_config(resource, secrets)
    props = tmp_path / "explained.properties"
    jaas = first.source_keys["east.sasl.jaas.config"]
    props.write_text(text.replace("east.sasl.jaas.config = [hidden]", f"east.sasl.jaas.config = {jaas}"))
    again = load_config(props)
    assert [f.name for f in again.enabled_flows()] == [f.name for f in first.enabled_flows()]
    assert again.flow("east", "west").model_dump() == first.flow("east", "west").model_dump()


def test_the_command_explains_the_shipped_example(capsys: object) -> None:
    assert main(["config", "explain", str(ROOT / "examples" / "strimzi-east-to-west.yaml")]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "east->west.enabled = true" in out and "# flows enabled: east->west" in out
