"""The shipped examples load, and docker-compose.yml fits together (no Docker engine needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mm2py.cli import build_parser
from mm2py.config.models import load_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").rglob("*.properties")) + sorted((ROOT / "examples").rglob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_configuration_loads(path: Path) -> None:
    config = load_config(str(path))
    assert set(config.clusters) >= {"east", "west"}
    assert not config.ignored_keys
    if "clusters-only" not in path.name:
        assert config.enabled_flows(), f"{path.name} enables no flow"


def test_active_active_example_runs_both_ways() -> None:
    config = load_config(str(ROOT / "examples" / "active-active.properties"))
    assert sorted(f.name for f in config.enabled_flows()) == ["east->west", "west->east"]


def test_docker_compose_worker_reaches_the_compose_brokers() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    worker = services["mm2py"]
    mounts = dict(v.split(":")[:2] for v in worker["volumes"])
    args = build_parser().parse_args(worker["command"][1:])
    host_dir = next(src for src, dst in mounts.items() if args.config.startswith(dst + "/"))
    config_path = ROOT / host_dir / Path(args.config).name
    config = load_config(str(config_path))
    internal = {}
    for name, svc in services.items():
        env = svc.get("environment", {})
        for listener in env.get("KAFKA_ADVERTISED_LISTENERS", "").split(","):
            if listener.startswith("INTERNAL://"):
                internal[name] = listener.removeprefix("INTERNAL://")
    for alias, cluster in config.clusters.items():
        assert cluster.bootstrap_servers in internal.values(), (alias, cluster.bootstrap_servers, internal)
    assert set(worker["depends_on"]) == set(internal)
    published = {p.split(":")[0] for p in worker.get("ports", [])}
    assert {str(args.rest_port), str(args.metrics_port)} <= published
    assert args.state_file.startswith("/state/") and "mm2py-state" in compose["volumes"]
