"""A Kafka Connect-shaped facade over the worker's flows: ``/connectors`` as Connect's REST API has it.

Tooling built for Kafka Connect (scripts, dashboards, ``kcctl``-style clients) can create, inspect,
pause, resume, stop, restart and delete MirrorMaker 2's connectors here (this module: the
:class:`Facade`; :mod:`mm2py.rest_api.connect.routes`: the config and status routes;
:mod:`mm2py.rest_api.connect.control`: the state changes, KIP-875 offsets and KIP-558 topics;
:mod:`mm2py.rest_api.connect.plugins`: ``/``, the plugins and validation;
:mod:`mm2py.rest_api.connect.loggers`: ``/admin/loggers``). How connector configs map onto flows is
:mod:`mm2py.rest_api.connect.config`'s (a
MirrorSourceConnector is a flow named as the connector, so a pair may have several); every flow not
created as a connector is listed under its own name (``east->west``, ``mirror-east-west-fast``) as a
MirrorSourceConnector. Errors have Connect's body, ``{"error_code": <status>, "message": "..."}``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastapi import Request

from mm2py import __version__
from mm2py.config.models import pair_name
from mm2py.engine.task_contract import HALTED_STATES, TaskState
from mm2py.rest_api.connect.config import (
    CLASSES,
    Kind,
    as_text,
    connector_kind,
    connector_patch,
    flow_connector_config,
    owned_keys,
    plan_connector,
    released_settings,
)
from mm2py.rest_api.connect.errors import ConnectError
from mm2py.rest_api.connect.halted import HaltedConnectors
from mm2py.rest_api.connect.validate import problems
from mm2py.rest_api.shared import AnyWorker, redacted

__all__ = ["Facade", "worker_id"]

#: the version a connector and its tasks report in their status (Connect 4.1 shows the plugin's)
VERSION = __version__
#: a flow's or task's states, each a state of Connect's too
_CONNECT_STATES = frozenset(TaskState)


def _state(state: str) -> str:
    """A flow or task state in Connect's words (anything else is UNASSIGNED)."""
    return state if state in _CONNECT_STATES else TaskState.UNASSIGNED


def worker_id(request: Request) -> str:
    """This worker as Connect names workers in statuses: the host and port it was asked on."""
    return f"{request.url.hostname}:{request.url.port}"


class Facade:
    """Connectors as the worker's flows (registry of names in ``worker.connectors``)."""

    def __init__(self, worker: AnyWorker) -> None:
        self.worker = worker
        #: paused and stopped checkpoint and heartbeat connectors
        self.halted = HaltedConnectors(worker)
        #: checkpoint and heartbeat connectors' emitted counts when their topics were last reset
        self._topic_marks: dict[str, tuple[int, int]] = {}

    # -- names ------------------------------------------------------------------------------------
    def _pair(self, config: dict[str, str]) -> str:
        return pair_name(config["source.cluster.alias"], config["target.cluster.alias"])

    def _flow_of(self, name: str, config: dict[str, str]) -> str:
        """What a connector drives: a MirrorSourceConnector its own flow, named as it is (one
        registered before flows had names, not in the worker's named flows: its pair's unnamed
        flow); a checkpoint or heartbeat connector its pair (the name of the pair)."""
        if connector_kind(config) == "source" and name in self.worker.named:
            return name
        return self._pair(config)

    def _registered(self, kind: Kind, pair: str) -> str | None:
        """The pair's checkpoint or heartbeat connector (one per pair)."""
        for name, config in self.worker.connectors.items():
            if connector_kind(config) == kind and self._pair(config) == pair:
                return name
        return None

    def pair_flows(self, pair: str) -> list[str]:
        """The running flows of ``pair``, oldest first (the checkpoint connector applies to each)."""
        return [n for n, r in self.worker.flows.items() if r.flow.pair == pair]

    def names(self) -> list[str]:
        driven = {self._flow_of(n, c) for n, c in self.worker.connectors.items()
                  if connector_kind(c) == "source"}
        return sorted(self.worker.connectors) + sorted(f for f in self.worker.flows if f not in driven)

    def lookup(self, name: str) -> tuple[Kind, str, dict[str, str]]:
        """(kind, flow name — the pair's for a checkpoint or heartbeat connector —, config) of a
        connector; 404 for an unknown one."""
        config = self.worker.connectors.get(name)
        if config is not None:
            return connector_kind(config), self._flow_of(name, config), config
        runner = self.worker.flows.get(name)
        if runner is None:
            raise ConnectError(404, f"connector {name!r} not found")
        return "source", name, {"name": name, **flow_connector_config(runner.flow)}

    # -- shapes -----------------------------------------------------------------------------------
    def info(self, name: str) -> dict[str, Any]:
        config = self.lookup(name)[2]
        ids = [t["id"] for t in self.status(name, "")["tasks"]]
        return {"name": name, "config": redacted(config), "type": "source",
                "tasks": [{"connector": name, "task": i} for i in ids]}

    def status(self, name: str, worker: str) -> dict[str, Any]:
        kind, flow, _ = self.lookup(name)
        runner = self._runner_of(kind, flow)
        state: str = TaskState.UNASSIGNED
        trace: str | None = None
        tasks: list[dict[str, Any]] = [{"id": 0, "state": TaskState.RUNNING}]
        if kind != "source" and (halted := self.halted.get(name)) is not None:
            state = halted
        elif kind == "heartbeat":
            state = TaskState.RUNNING if flow in self.worker.startup.heartbeats else TaskState.UNASSIGNED
        elif runner is not None:
            st = runner.status()
            state, trace = _state(runner.state), st.get("trace")
            if kind == "source":
                tasks = [{"id": t["id"], "state": _state(t["state"]), "trace": t.get("trace")}
                         for t in st["tasks"]]
            elif st.get("checkpoints") is None and state == TaskState.RUNNING:
                state = TaskState.UNASSIGNED
        if state in (TaskState.PAUSED, TaskState.FAILED) and kind != "source":
            tasks = [{"id": 0, "state": state}] if self.halted.has_tasks(name) else []
        elif state == TaskState.PAUSED:
            tasks = [{**t, "state": TaskState.PAUSED} for t in tasks]
        elif state in (TaskState.STOPPED, TaskState.UNASSIGNED):
            tasks = []  # Connect: a stopped connector has no tasks
        connector = {"state": state, "worker_id": worker, **({"trace": trace} if trace else {}),
                     "version": VERSION}
        shaped = [{"id": t["id"], "state": t["state"], "worker_id": worker,
                   **({"trace": t["trace"]} if t.get("trace") else {}), "version": VERSION} for t in tasks]
        return {"name": name, "connector": connector, "tasks": shaped, "type": "source"}

    def _runner_of(self, kind: Kind, flow: str) -> Any:
        """A source connector's flow; for a checkpoint connector, the pair's oldest flow."""
        if kind == "source":
            return self.worker.flows.get(flow)
        flows = self.pair_flows(flow)
        return self.worker.flows[flows[0]] if flows else None

    def task_status(self, name: str, task: int, worker: str) -> dict[str, Any]:
        """One task's status; 404 for a task the connector does not have (as when stopped)."""
        try:
            tasks = self.status(name, worker)["tasks"]
        except ConnectError:
            tasks = []
        found = next((t for t in tasks if t["id"] == task), None)
        if found is None:
            raise ConnectError(404, f"no status for task {task} of connector {name!r}")
        return found

    # -- changes ----------------------------------------------------------------------------------
    async def put(self, name: str, raw: dict[str, Any], *, create_only: bool,
                  initial_state: str | None = None) -> bool:
        """Create or replace connector ``name``; True if it was created. ``initial_state``
        (KIP-980): a new MirrorSourceConnector's, ``PAUSED`` or ``STOPPED`` starting no task."""
        if str(raw.get("name", name)) != name:
            raise ConnectError(400, f"the config's name {raw.get('name')!r} differs from {name!r}")
        if "/" in name:
            raise ConnectError(400, f"connector names cannot contain '/': {name!r}")
        raw = {**raw, "name": name}
        clusters = {a: c.bootstrap_servers for a, c in self.worker.config.clusters.items()}
        found = problems(raw, clusters)
        if found:
            listed = "; ".join(f"{key}: {m}" for key, messages in found.items() for m in messages)
            cls = raw.get("connector.class") or "MirrorSourceConnector"
            raise ConnectError(400, f"the connector config is invalid ({listed}); PUT "
                                    f"/connector-plugins/{cls}/config/validate shows each problem "
                                    "beside its key")
        exists = name in self.worker.connectors or name in self.worker.flows
        if exists and create_only:
            raise ConnectError(409, f"connector {name!r} already exists")
        kind = connector_kind(raw)
        pair = pair_name(str(raw.get("source.cluster.alias")), str(raw.get("target.cluster.alias")))
        checkpoint = self._registered("checkpoint", pair)
        plan = plan_connector(raw, has_checkpoint=checkpoint is not None,
                              has_heartbeat=self._registered("heartbeat", pair) is not None)
        if "->" in name and name != plan.flow:
            raise ConnectError(400, f"a connector named like a flow must be that flow's: {name!r}")
        flow = name if kind == "source" else plan.flow  # a new source connector: a flow of its own
        if exists:
            old_kind, flow, old = self.lookup(name)
            if (old_kind, self._pair(old)) != (kind, pair):
                raise ConnectError(400, f"connector {name!r} is a {CLASSES[old_kind]} of {flow}; "
                                        "delete it to create another connector under its name")
        other = self._registered(kind, plan.flow) if kind != "source" else None
        if other is not None and other != name:
            raise ConnectError(409, f"{plan.flow} has a {CLASSES[kind]} already: {other!r}")
        if kind == "source" and checkpoint is not None:  # that connector's settings apply to it too
            checkpointing = (released_settings("checkpoint") if self.halted.get(checkpoint) is not None
                             else plan_connector(self.worker.connectors[checkpoint]).settings)
            plan = replace(plan, settings={**plan.settings, **checkpointing})
        halted = initial_state if initial_state in HALTED_STATES else None
        if exists:
            halted = self.halted.get(name) if kind != "source" else None
        await self._apply(flow, kind, plan, exists, halted, as_text(raw))

        def register() -> None:
            self.worker.connectors[name] = as_text(raw)
            if kind != "source":
                self.halted.set(name, halted, created=not exists)

        await self.worker.edit_state_file(register)
        return not exists

    async def patch(self, name: str, changes: dict[str, Any]) -> None:
        """KIP-477: ``changes`` merged into the connector's config (a null value removes its key)."""
        config = dict(self.lookup(name)[2])
        for key, value in changes.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        await self.put(name, config, create_only=False)

    async def _apply(self, flow: str, kind: Kind, plan: Any, exists: bool, halted: str | None,
                     config: dict[str, str]) -> None:
        """``flow``: the source connector's own flow; the pair's name for the other kinds."""
        w = self.worker
        if kind == "source":
            keep: set[str] = set()  # the settings of the pair's checkpoint and heartbeat connectors
            for aux in ("checkpoint", "heartbeat"):
                if self._registered(aux, plan.flow) is not None:
                    keep |= owned_keys(aux)
            patch = connector_patch(kind, plan.settings, frozenset(keep))
            if exists:
                await w.update_flow(flow, patch)
            elif flow in w.flows:
                raise ConnectError(409, f"flow {flow} runs already (connector {flow!r}); "
                                        f"PUT /connectors/{flow}/config to change it")
            else:
                await w.add_flow(plan.source, plan.target, patch, plan.clusters, halted=halted, name=flow)
        elif kind == "checkpoint" and not self.pair_flows(flow):
            raise ConnectError(400, f"a MirrorCheckpointConnector needs its pair's flow: create "
                                    f"a MirrorSourceConnector of {flow} first")
        else:  # a halted checkpoint or heartbeat connector's job stays off (Connect keeps its state)
            await self.halted.apply(kind, config, halted=halted is not None)

    async def delete(self, name: str) -> None:
        kind, flow, _ = self.lookup(name)
        w = self.worker
        if kind == "source" and flow in w.flows:
            await w.remove_flow(flow)
        elif kind == "checkpoint":
            for each in self.pair_flows(flow):
                await w.update_flow(each, connector_patch(kind, released_settings(kind)))
        elif kind == "heartbeat":
            source, target = flow.split("->", 1)
            await w.set_pair_settings(source, target, connector_patch(kind, released_settings(kind)))
        self._topic_marks.pop(name, None)

        def forget() -> None:
            self.halted.set(name, None)
            w.connectors.pop(name, None)

        await w.edit_state_file(forget)

    async def halt(self, name: str, state: str) -> None:
        """Pause or stop a connector (a MirrorSourceConnector: its flow)."""
        kind, flow, config = self.lookup(name)
        if kind == "source":
            await self.worker.halt_flow(flow, state)
        else:
            await self.halted.halt(name, kind, config, state)

    async def resume(self, name: str) -> None:
        kind, flow, config = self.lookup(name)
        if kind == "source":
            await self.worker.resume_flow(flow)
        else:
            await self.halted.resume(name, kind, config)

    async def restart(self, name: str) -> None:
        """Restart a connector and its tasks (a halted one stays halted)."""
        kind, flow, config = self.lookup(name)
        if kind == "source":
            await self.worker.restart_flow(flow)
        elif self.halted.get(name) is None:
            await self.halted.restart(kind, config)

    def source_flow(self, name: str, what: str) -> str:
        """The flow of a MirrorSourceConnector; a 409 naming ``what`` for the other kinds."""
        kind, flow, _ = self.lookup(name)
        if kind != "source":
            raise ConnectError(409, f"{what} applies to a MirrorSourceConnector (the flow {flow}); "
                                    f"{name!r} is a {CLASSES[kind]}: delete it to turn it off")
        return flow

    # -- active topics (KIP-558) ------------------------------------------------------------------
    def _emitted(self, kind: Kind, flow: str) -> tuple[int, int, str] | None:
        """A checkpoint or heartbeat connector's writer (its identity), how much it wrote, where."""
        if kind == "heartbeat":
            beats = self.worker.startup.heartbeats.get(flow)
            return None if beats is None else (id(beats), beats.sent, beats.topic)
        runner = self._runner_of(kind, flow)
        if runner is None or runner.checkpoints is None:
            return None
        checkpoints = runner.checkpoints
        return id(checkpoints), checkpoints.metrics.checkpoints_emitted, runner.flow.checkpoints_topic()

    def topics(self, name: str) -> list[str]:
        """The topics the connector wrote to since it was created or its topics were reset (an
        unknown connector has none, as in Connect)."""
        try:
            kind, flow, _ = self.lookup(name)
        except ConnectError:
            return []
        if kind == "source":
            return self.worker.active_topics.topics(flow)
        emitted = self._emitted(kind, flow)
        if emitted is None:
            return []
        writer, count, topic = emitted
        mark = self._topic_marks.get(name)
        return [topic] if count > (mark[1] if mark is not None and mark[0] == writer else 0) else []

    async def reset_topics(self, name: str) -> None:
        try:
            kind, flow, _ = self.lookup(name)
        except ConnectError:
            return  # as in Connect: nothing to forget
        if kind == "source":
            await self.worker.reset_active_topics(flow)
        elif (emitted := self._emitted(kind, flow)) is not None:
            self._topic_marks[name] = emitted[:2]
