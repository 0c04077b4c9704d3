"""deploy/kubernetes/ (no cluster needed): every manifest read into the official ``kubernetes``
client's models and written back unchanged, so a misspelled or unknown field fails (the
ServiceMonitor, a CRD, against the fields of the Prometheus Operator's schema it uses); the
kustomization lists every manifest; the container's arguments are what ``mm2py run`` parses, and
the probes, the Service and the ServiceMonitor reach the ports and routes the worker serves (and
the Dockerfile exposes); the ConfigMap's resource loads with the Secrets the Deployment mounts."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes.client import ApiClient

from mm2py.cli import build_parser
from mm2py.config.models import load_config
from mm2py.rest_api.app import create_app
from tests.support.fake_flows import FakeWorker

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
#: each built-in kind the directory holds, with its model in the client
MODELS = {
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Service"): "V1Service",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
}
SERVICE_MONITOR = ("monitoring.coreos.com/v1", "ServiceMonitor")
#: the ServiceMonitor fields this directory may use (monitoring.coreos.com/v1's schema, in part)
SERVICE_MONITOR_FIELDS: dict[str, Any] = {
    "apiVersion": None, "kind": None,
    "metadata": {"name": None, "namespace": None, "labels": None, "annotations": None},
    "spec": {
        "jobLabel": None, "targetLabels": None, "podTargetLabels": None,
        "selector": {"matchLabels": None, "matchExpressions": None},
        "namespaceSelector": {"any": None, "matchNames": None},
        "endpoints": {"port": None, "targetPort": None, "path": None, "scheme": None, "interval": None,
                      "scrapeTimeout": None, "honorLabels": None, "honorTimestamps": None,
                      "params": None, "relabelings": None, "metricRelabelings": None,
                      "basicAuth": None, "authorization": None, "tlsConfig": None},
    },
}


def documents() -> dict[tuple[str, str], dict[str, Any]]:
    """Every manifest of the directory by (apiVersion, kind): one each."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            key = (doc["apiVersion"], doc["kind"])
            assert key not in found, f"{path.name}: a second {key}"
            found[key] = doc
    return found


DOCS = documents()


def as_model(doc: dict[str, Any], model: str) -> Any:
    return ApiClient().deserialize(json.dumps(doc), model, "application/json")


@pytest.mark.parametrize("key", sorted(MODELS), ids=lambda k: k[1])
def test_manifest_is_the_api_model_unchanged(key: tuple[str, str]) -> None:
    doc = DOCS[key]
    model = as_model(doc, MODELS[key])
    # the model keeps only the fields it knows: a misspelled or unknown one is missing on the way back
    assert ApiClient().sanitize_for_serialization(model) == doc


def test_an_unknown_field_would_fail() -> None:
    doc = json.loads(json.dumps(DOCS[("apps/v1", "Deployment")]))
    doc["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/flows"}}
    model = as_model(doc, "V1Deployment")
    assert ApiClient().sanitize_for_serialization(model) != doc


def unknown_fields(value: Any, allowed: Any, path: str) -> list[str]:
    if allowed is None:
        return []
    if isinstance(value, list):
        return [bad for i, item in enumerate(value) for bad in unknown_fields(item, allowed, f"{path}[{i}]")]
    assert isinstance(value, dict), path
    return [f"{path}.{name}" for name in value if name not in allowed] + [
        bad for name, item in value.items() if name in allowed
        for bad in unknown_fields(item, allowed[name], f"{path}.{name}")]


def test_service_monitor_fields() -> None:
    monitor = DOCS[SERVICE_MONITOR]
    assert unknown_fields(monitor, SERVICE_MONITOR_FIELDS, "ServiceMonitor") == []
    assert unknown_fields({"spec": {"endpoints": [{"prot": "metrics"}]}}, SERVICE_MONITOR_FIELDS, "x")


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    files = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)
    assert set(DOCS) == set(MODELS) | {SERVICE_MONITOR}


def deployment() -> dict[str, Any]:
    return DOCS[("apps/v1", "Deployment")]


def container() -> dict[str, Any]:
    (only,) = deployment()["spec"]["template"]["spec"]["containers"]
    return only


def run_args() -> argparse.Namespace:
    args = container()["args"]
    assert args[:2] == ["mm2py", "run"]
    return build_parser().parse_args(args[1:])


def mounts() -> dict[str, tuple[str, dict[str, Any]]]:
    """mount path -> (volume name, volume)."""
    volumes = {v["name"]: v for v in deployment()["spec"]["template"]["spec"]["volumes"]}
    return {m["mountPath"]: (m["name"], volumes[m["name"]]) for m in container()["volumeMounts"]}


def exposed() -> set[int]:
    """The ports the lean image exposes (the runtime stage's EXPOSE, which lean inherits)."""
    text = (ROOT / "Dockerfile").read_text()
    runtime = text.split("AS runtime", 1)[1].split("FROM ", 1)[0]
    return {int(p) for line in re.findall(r"^EXPOSE (.+)$", runtime, re.M) for p in line.split()}


def test_one_replica_that_never_overlaps() -> None:
    spec = deployment()["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}  # a rollout never runs two workers
    assert container()["image"] == "mm2py:lean"
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 1000 and pod["securityContext"]["runAsNonRoot"]
    assert pod["terminationGracePeriodSeconds"] >= 30
    pdb = DOCS[("policy/v1", "PodDisruptionBudget")]["spec"]
    assert pdb["maxUnavailable"] == 1
    labels = spec["template"]["metadata"]["labels"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    assert spec["selector"]["matchLabels"].items() <= labels.items()


def test_ports_are_what_the_worker_serves() -> None:
    args = run_args()
    assert (args.rest_port, args.metrics_port) == (8083, 9108)
    assert args.rest_host == args.metrics_host == "0.0.0.0"  # reachable from outside the pod
    assert {8083, 9108} <= exposed()
    ports = {p["name"]: p["containerPort"] for p in container()["ports"]}
    assert ports == {"rest": args.rest_port, "metrics": args.metrics_port}
    service = DOCS[("v1", "Service")]["spec"]
    assert service["selector"].items() <= deployment()["spec"]["template"]["metadata"]["labels"].items()
    assert {p["name"]: (p["port"], ports[p["targetPort"]]) for p in service["ports"]} == {
        "rest": (8083, 8083), "metrics": (9108, 9108)}
    monitor = DOCS[SERVICE_MONITOR]["spec"]
    assert monitor["selector"]["matchLabels"].items() <= DOCS[("v1", "Service")]["metadata"]["labels"].items()
    assert [(e["port"], e["path"]) for e in monitor["endpoints"]] == [("metrics", "/metrics")]


def get(path: str) -> httpx.Response:
    app = create_app(FakeWorker())

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mm2py") as client:
            return await client.get(path)

    return asyncio.run(go())


@pytest.mark.parametrize("probe", ["readinessProbe", "livenessProbe"])
def test_probes_ask_real_routes(probe: str) -> None:
    check = container()[probe]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in container()["ports"]}
    assert ports[check["port"]] == run_args().rest_port
    assert check.get("scheme", "HTTP") == "HTTP"  # the REST listener is plain inside the pod
    response = get(check["path"])
    assert response.status_code == 200, response.text


def test_volumes_are_where_run_reads() -> None:
    args = run_args()
    by_path = mounts()
    config_dir, name = str(Path(args.config).parent), Path(args.config).name
    _, volume = by_path[config_dir]
    assert volume["configMap"]["name"] == DOCS[("v1", "ConfigMap")]["metadata"]["name"]
    assert name in DOCS[("v1", "ConfigMap")]["data"]
    _, state = by_path[str(Path(args.state_file).parent)]
    claim = DOCS[("v1", "PersistentVolumeClaim")]["metadata"]["name"]
    assert state["persistentVolumeClaim"]["claimName"] == claim
    # --secrets-dir reads <dir>/<secretName>/<key>: each Secret's volume at <dir>/<secretName>
    secrets = {path: volume for path, (_, volume) in by_path.items() if "secret" in volume}
    assert secrets
    for path, volume in secrets.items():
        assert path == f"{args.secrets_dir}/{volume['secret']['secretName']}"


def referenced_secrets(value: Any) -> set[tuple[str, str]]:
    """(secretName, key) of every Secret reference in a resource."""
    found: set[tuple[str, str]] = set()
    if isinstance(value, list):
        for item in value:
            found |= referenced_secrets(item)
    elif isinstance(value, dict):
        if "secretName" in value:
            found |= {(value["secretName"], v) for k, v in value.items() if k != "secretName"}
        for item in value.values():
            found |= referenced_secrets(item)
    return found


def test_config_map_resource_loads(tmp_path: Path) -> None:
    text = DOCS[("v1", "ConfigMap")]["data"][Path(run_args().config).name]
    resource = yaml.safe_load(text)
    assert resource["kind"] == "KafkaMirrorMaker2"
    wanted = referenced_secrets(resource)
    mounted = {v["secret"]["secretName"] for _, v in mounts().values() if "secret" in v}
    assert {name for name, _ in wanted} == mounted  # every Secret it names is mounted, no other
    secrets = tmp_path / "secrets"
    for name, key in wanted:
        (secrets / name).mkdir(parents=True, exist_ok=True)
        text_of = "-----BEGIN CERTIFICATE-----\n" if key.endswith(".crt") else "s3cret"
        (secrets / name / key).write_text(text_of)
    path = tmp_path / "mirror.yaml"
    path.write_text(text)
    config = load_config(path, secrets)
    assert [f.name for f in config.enabled_flows()] == ["east->west"]
    assert config.ignored_keys == ()
    for alias in ("east", "west"):  # each cluster's password read from its mounted Secret
        assert "s3cret" in str(config.clusters[alias].model_dump()), alias
