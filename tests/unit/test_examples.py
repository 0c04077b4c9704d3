"""The shipped examples load, and docker-compose.yml fits together (no Docker engine needed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from mm2py.cli import build_parser
from mm2py.config.models import load_config
from mm2py.config.properties import parse_properties
from mm2py.rest_api.security.settings import rest_settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").rglob("*.properties")) + sorted((ROOT / "examples").rglob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_configuration_loads(path: Path) -> None:
    config = load_config(str(path))
    assert set(config.clusters) >= {"east", "west"}
    # the REST API's keys are the worker's, not a flow's (rest_api/security/settings.py reads them)
    assert not [k for k in config.ignored_keys if not k.startswith(("listeners", "rest.", "mm2py.rest."))]
    if "clusters-only" not in path.name:
        assert config.enabled_flows(), f"{path.name} enables no flow"


def test_active_active_example_runs_both_ways() -> None:
    config = load_config(str(ROOT / "examples" / "active-active.properties"))
    assert sorted(f.name for f in config.enabled_flows()) == ["east->west", "west->east"]


COMPOSE = ROOT / "docker-compose.yml"
#: the services that run ``mm2py run``, by profile: one per profile, so a profile mirrors each flow once
WORKERS = {"inprocess": "mm2py", "spark": "mm2py-spark"}


def _compose() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return compose


def _brokers(services: dict[str, Any]) -> dict[str, str]:
    """Broker service -> its INTERNAL advertised address (what containers bootstrap from)."""
    internal = {}
    for name, svc in services.items():
        env = svc.get("environment", {})
        for listener in env.get("KAFKA_ADVERTISED_LISTENERS", "").split(","):
            if listener.startswith("INTERNAL://"):
                internal[name] = listener.removeprefix("INTERNAL://")
    return internal


@pytest.mark.parametrize("profile", sorted(WORKERS))
def test_docker_compose_worker_reaches_the_compose_brokers(profile: str) -> None:
    compose = _compose()
    services = compose["services"]
    worker = services[WORKERS[profile]]
    assert worker["profiles"] == [profile]
    mounts = dict(v.split(":")[:2] for v in worker["volumes"])
    args = build_parser().parse_args(worker["command"][1:])
    host_dir = next(src for src, dst in mounts.items() if args.config.startswith(dst + "/"))
    config_path = ROOT / host_dir / Path(args.config).name
    config = load_config(str(config_path))
    internal = _brokers(services)
    for alias, cluster in config.clusters.items():
        assert cluster.bootstrap_servers in internal.values(), (alias, cluster.bootstrap_servers, internal)
    # started once the brokers (and whatever else it needs) are healthy, and the REST API's
    # development certificate written: no failed first attempt
    assert set(internal) <= set(worker["depends_on"])
    for name, dependency in worker["depends_on"].items():
        if services[name].get("command", [])[:3] == ["python", "-m", "mm2py.rest_api.security.dev_cert"]:
            assert dependency == {"condition": "service_completed_successfully"}, name
            assert services[name]["profiles"] == [profile], name
            continue
        assert dependency == {"condition": "service_healthy"}, name
        assert "test" in services[name]["healthcheck"], name
    # the REST API over HTTPS with Basic authentication (the config file's Connect keys), on the
    # certificate and users the one-shot service wrote into the volume the worker reads
    keys = parse_properties(config_path.read_text())
    settings = rest_settings(keys, kafka_opts=worker["environment"]["KAFKA_OPTS"])
    assert settings is not None and [(x.scheme, x.port) for x in settings.listeners] == [("https", 8083)]
    certs = next(dst for src, dst in mounts.items() if src == "mm2py-certs")
    assert settings.tls is not None and str(settings.tls.keystore_location).startswith(certs + "/")
    assert settings.jaas_file == f"{certs}/rest-jaas.conf" and settings.authenticates
    assert settings.read_only_users == {"viewer"}
    probe = worker["healthcheck"]["test"]
    assert "--probe" in probe and "https://localhost:8083/flows" in probe
    published = {p.split(":")[0] for p in worker.get("ports", [])}
    assert {"8083", str(args.metrics_port)} <= published
    volume = next(src for src, dst in mounts.items() if args.state_file.startswith(dst + "/"))
    assert volume in compose["volumes"]


def test_docker_compose_profiles_run_one_worker_each() -> None:
    services = _compose()["services"]
    # the brokers run in every profile; everything else belongs to exactly one
    assert {name for name, svc in services.items() if "profiles" not in svc} == set(_brokers(services))
    for profile, worker in WORKERS.items():
        runs = [name for name, svc in services.items()
                if profile in svc.get("profiles", []) and svc.get("command", [])[:2] == ["mm2py", "run"]]
        assert runs == [worker], profile
    # `docker compose up` without --profile: the in-process worker (.env sets the default)
    env = dict(line.split("=", 1) for line in (ROOT / ".env").read_text().splitlines()
               if line.strip() and not line.startswith("#"))
    assert env["COMPOSE_PROFILES"] == "inprocess"


def test_docker_compose_images_are_targets_of_the_dockerfile() -> None:
    services = _compose()["services"]
    stages = re.findall(r"^FROM \S+ AS (\S+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert stages[-1] == "lean", "the default target (the last stage) is the lean image"
    images: dict[str, set[str]] = {}
    for name, svc in services.items():
        if "build" in svc:
            assert svc["build"]["target"] in stages, name
            images.setdefault(svc["image"], set()).add(svc["build"]["target"])
    assert images == {"mm2py:lean": {"lean"}, "mm2py:spark": {"spark"}}
    assert services["mm2py"]["image"] == "mm2py:lean"
    # an image of ours is built by a service of the same profile (there is no registry to pull it from)
    for name, svc in services.items():
        if svc["image"].startswith("mm2py:"):
            builders = [other for other in services.values()
                        if "build" in other and other["image"] == svc["image"]]
            assert any(set(other["profiles"]) == set(svc["profiles"]) for other in builders), name


def test_docker_compose_spark_profile_forms_one_cluster() -> None:
    services = _compose()["services"]
    master = services["spark-master"]["command"]
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    url = f"spark://{master[master.index('--host') + 1]}:{master[master.index('--port') + 1]}"
    worker = services["spark-worker"]["command"]
    assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"] and worker[-1] == url
    driver = services["mm2py-spark"]
    args = build_parser().parse_args(driver["command"][1:])
    assert args.runtime == "spark" and args.spark_master == url
    # the executors reach the driver by its host name
    assert f"spark.driver.host={driver['hostname']}" in args.spark_conf
    # a slot for each task's lease and one for its successor
    config = load_config(str(ROOT / "examples" / "docker" / Path(args.config).name))
    tasks = sum(flow.tasks_max for flow in config.enabled_flows())
    assert int(worker[worker.index("--cores") + 1]) >= 2 * tasks
    for name in ("spark-master", "spark-worker", "mm2py-spark"):
        assert services[name]["image"] == "mm2py:spark", name
