"""mm2py.cli.demo's own promises that hold without clusters: its flow is the one of
examples/east-to-west.properties (only the addresses differ), and a bad argument is refused before
any cluster starts. (Running the demo starts the dev clusters on fixed ports and mirrors every topic
of east: not something the shared test clusters can host; its offsets table's reader is checked on a
real broker in tests/integration/test_demo_end_offsets.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from mm2py.cli import demo
from mm2py.config.models import MirrorMakerConfig, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_flow_is_the_example_files_flow() -> None:
    example = load_config(str(ROOT / "examples" / "east-to-west.properties"))
    clusters = {c.alias: c.bootstrap_servers for c in example.clusters.values()}
    ours = MirrorMakerConfig.from_mapping({"clusters": clusters, **demo.FLOW})
    assert [f.name for f in example.enabled_flows()] == ["east->west"]
    assert [f.name for f in ours.enabled_flows()] == ["east->west"]
    assert ours.enabled_flows()[0] == example.enabled_flows()[0]


def test_the_demo_topics_use_distinct_codecs() -> None:
    codecs = [codec for codec, _ in demo.TOPICS.values()]
    assert len(set(codecs)) == len(codecs) and all(n > 0 for _, n in demo.TOPICS.values())


def test_a_bad_argument_is_refused_before_any_cluster_starts(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    def no_clusters() -> None:
        raise AssertionError("the dev clusters were started")

    monkeypatch.setattr(demo.dev, "up", no_clusters)
    with pytest.raises(SystemExit) as exit_:
        demo.main(["--seconds", "soon"])
    assert exit_.value.code == 2
    assert "--seconds: invalid float value: 'soon'" in capsys.readouterr().err
