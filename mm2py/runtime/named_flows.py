"""Flows with names of their own: several per cluster pair, kept in the state file.

A flow created without a name is its pair's unnamed flow, ``east->west``: MM2 keys under the
``east->west.`` prefix (:mod:`.steering`), as in ``mm2.properties``. A flow created with a name
(``mirror-east-west-fast``, a Kafka Connect connector's name) lives in the state file's ``flows``
section — ``name -> {"source", "target", "settings", "seq"}`` — and its configuration is its
pair's, as the configuration file and the clusters added at run time resolve it (not the unnamed
flow's run-time settings), with its own settings over it. ``seq`` orders the flows of a pair by
age: the unnamed flow is the oldest, then the named ones as they were created; a topic both would
mirror stays the older one's (:mod:`mm2py.engine.flow_overlap`). A state file without the section
(written before flows had names) reads as having no named flow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from mm2py.config.errors import ConfigError
from mm2py.config.models import FlowConfig, MirrorMakerConfig, check_flow_name, pair_name
from mm2py.engine.controller import Controller
from mm2py.engine.flow_overlap import Selects, first_overlap, older_claim
from mm2py.runtime.flows import FlowRunnerBase, controller_for
from mm2py.runtime.steering import FlowConflictError, layered

__all__ = ["NamedFlows", "check_overlap", "pair_config"]

#: the running flows by name
Runners = Mapping[str, FlowRunnerBase[Any]]


def pair_config(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> MirrorMakerConfig:
    """The configuration named flows start from: the base keys and the run-time cluster keys, not
    the unnamed flows' run-time settings (``A->B.*`` keys of the overlay)."""
    return layered(base, {k: v for k, v in overlay.items() if "->" not in k})


class NamedFlows:
    """The ``flows`` section of the state file (a dict shared with the worker's
    :class:`~mm2py.runtime.state_file.StateFile`)."""

    def __init__(self, section: dict[str, Any]) -> None:
        for name, spec in section.items():
            if not (isinstance(spec, dict) and isinstance(spec.get("source"), str)
                    and isinstance(spec.get("target"), str) and isinstance(spec.get("settings"), dict)):
                raise ConfigError(f"state file: flow {name!r} needs 'source', 'target' and 'settings'")
        self.section = section

    def __contains__(self, name: object) -> bool:
        return name in self.section

    def names(self) -> list[str]:
        """Oldest first."""
        return sorted(self.section, key=lambda n: int(self.section[n].get("seq", 0)))

    def age(self, flow: FlowConfig) -> float:
        """0 for an unnamed flow, then growing with each named flow created (one not stored yet,
        being created, is the youngest)."""
        if flow.label is None:
            return 0
        spec = self.section.get(flow.label)
        return float("inf") if spec is None else int(spec.get("seq", 0))

    def siblings(self, flow: FlowConfig, runners: Runners) -> list[tuple[str, Selects]]:
        """The other running flows of ``flow``'s pair (of ``runners``), oldest first: (name, their
        rule for a topic)."""
        return [(r.flow.name, r.controller.selects) for r in self._others(flow, runners)]

    def claim(self, flow: FlowConfig, runners: Runners, topic: str) -> str | None:
        """The older flow of ``flow``'s pair that mirrors ``topic``, if any (it keeps the topic)."""
        age = self.age(flow)
        older = [(r.flow.name, r.controller.selects) for r in self._others(flow, runners)
                 if self.age(r.flow) < age]
        return older_claim(topic, older)

    def _others(self, flow: FlowConfig, runners: Runners) -> list[FlowRunnerBase[Any]]:
        others = [r for n, r in list(runners.items()) if n != flow.name and r.flow.pair == flow.pair]
        return sorted(others, key=lambda r: self.age(r.flow))

    def settings(self, name: str) -> dict[str, str]:
        return dict(self.section[name]["settings"])

    def config(self, name: str, base: MirrorMakerConfig,
               settings: Mapping[str, Any] | None = None) -> FlowConfig:
        """Flow ``name``'s configuration over ``base`` (:func:`pair_config`), with ``settings`` in
        place of its stored ones if given (validated: a ConfigError names the key)."""
        spec = self.section[name]
        pair = base.flow(spec["source"], spec["target"])
        return pair.named(name, self.settings(name) if settings is None else settings)

    def configs(self, base: MirrorMakerConfig) -> list[FlowConfig]:
        return [self.config(name, base) for name in self.names()]

    def put(self, name: str, source: str, target: str, settings: Mapping[str, str]) -> None:
        """Add a named flow (the youngest) or replace its settings."""
        check_flow_name(name, source, target)
        spec = self.section.get(name)
        seq = int(spec["seq"]) if spec is not None else 1 + max(
            (int(s.get("seq", 0)) for s in self.section.values()), default=0)
        self.section[name] = {"source": source, "target": target, "settings": dict(settings), "seq": seq}

    def remove(self, name: str) -> None:
        self.section.pop(name, None)

    @staticmethod
    def is_pair(name: str, source: str, target: str) -> bool:
        return name == pair_name(source, target)


async def check_overlap(flow: FlowConfig, controller: Controller,
                        others: Sequence[tuple[str, Selects]]) -> None:
    """Raise :class:`FlowConflictError` when ``flow`` would mirror a topic present on its source
    that one of ``others`` (the other flows of its pair: name, rule) mirrors; ``controller``: one
    with the flow's clusters (its admin clients are used, its filter is not)."""
    if not others:
        return
    probe = controller_for(flow, (controller.source_admin, controller.target_admin))
    topics = await asyncio.to_thread(probe.source_admin.list_topics)
    hit = first_overlap(topics, probe.selects, others, probe.policy.is_heartbeats_topic)
    if hit is not None:
        topic, other = hit
        raise FlowConflictError(
            f"flow {flow.name!r} would mirror topic {topic!r} of {flow.source} to {flow.target}, "
            f"which flow {other!r} mirrors already: give the flows of a pair disjoint topics")
