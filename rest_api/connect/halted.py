"""The facade's halted checkpoint and heartbeat connectors: pause, stop, resume, restart.

In Kafka Connect each of MirrorMaker 2's connectors has a target state of its own; in mm2py the
checkpoint and heartbeat connectors are settings of their pair (:mod:`mm2py.rest_api.connect.config`).
Pausing or stopping one turns its job off (the switches it owns set to ``false``, as when it is
deleted) and keeps it halted; resuming it applies its config again; restarting it turns its job
off and on. Each halted connector's task state (``PAUSED`` or ``STOPPED``) is kept in the state
file (section ``connector_states``, its name on disk), and a halted connector whose config is
replaced stays halted, as in Connect. One created halted (KIP-980) has no task until first
resumed, as in Connect, where its tasks are not generated before it starts. A
MirrorSourceConnector's task state is its flow's (the worker's ``halt_flow``/``resume_flow``).
"""

from __future__ import annotations

from typing import Any

from mm2py.rest_api.connect.config import Kind, connector_patch, plan_connector, released_settings
from mm2py.rest_api.shared import AnyWorker

__all__ = ["HaltedConnectors"]


class HaltedConnectors:
    """The checkpoint and heartbeat connectors kept PAUSED or STOPPED (Connect's target state)."""

    def __init__(self, worker: AnyWorker) -> None:
        self.worker = worker
        #: connector name -> {"state": PAUSED or STOPPED, "tasks": whether it ever ran its task}
        self.section: dict[str, dict[str, Any]] = worker.state_file.section("connector_states")

    def get(self, name: str) -> str | None:
        found = self.section.get(name)
        return None if found is None else str(found["state"])

    def has_tasks(self, name: str) -> bool:
        """False for a connector created halted and not resumed since."""
        return bool(self.section.get(name, {}).get("tasks", True))

    async def apply(self, kind: Kind, config: dict[str, str], halted: bool, clusters: bool = True) -> None:
        """The pair's settings for a checkpoint or heartbeat connector: its own, or, ``halted``, its
        job turned off."""
        plan = plan_connector(config)
        patch = connector_patch(kind, released_settings(kind) if halted else plan.settings)
        if kind == "checkpoint":  # it applies to every flow of its pair
            for name in [n for n, r in self.worker.flows.items() if r.flow.pair == plan.flow]:
                await self.worker.update_flow(name, patch)
        else:
            await self.worker.set_pair_settings(plan.source, plan.target, patch,
                                                plan.clusters if clusters else None)

    async def halt(self, name: str, kind: Kind, config: dict[str, str], state: str) -> None:
        await self.apply(kind, config, halted=True, clusters=False)
        await self.worker.edit_state_file(lambda: self.set(name, state))

    async def resume(self, name: str, kind: Kind, config: dict[str, str]) -> None:
        if name in self.section:
            await self.apply(kind, config, halted=False, clusters=False)
            await self.worker.edit_state_file(lambda: self.set(name, None))

    async def restart(self, kind: Kind, config: dict[str, str]) -> None:
        """Off and on again (a halted connector stays halted, as Connect restarts nothing then)."""
        await self.apply(kind, config, halted=True, clusters=False)
        await self.apply(kind, config, halted=False, clusters=False)

    def set(self, name: str, state: str | None, created: bool = False) -> None:
        """``name``'s state (None: running, or deleted; ``created``: halted as it is created), kept
        in the state file when the caller next writes it (``WorkerBase.edit_state_file``)."""
        if state is None:
            self.section.pop(name, None)
        else:
            self.section[name] = {"state": state, "tasks": self.has_tasks(name) and not created}
