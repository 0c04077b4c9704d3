"""Changes made to a running worker (REST), kept as MM2 keys layered over its configuration file.

A flow created over HTTP is nothing but ``east->west.enabled = true`` plus its settings under the
``east->west.`` prefix; a cluster added with it is ``clusters`` plus ``<alias>.bootstrap.servers``.
Layering those keys over the file's keys and validating the whole again gives the same errors,
defaults and precedence as the file itself. With a state file the layer survives restarts: the
worker writes it after every accepted change and reads it back at start.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from mm2py.engine.config import FlowConfig, MirrorMakerConfig
from mm2py.engine.config_errors import ConfigError
from mm2py.engine.filters import TopicFilter

__all__ = [
    "FILTER_KEYS",
    "ClusterConflictError",
    "FlowExistsError",
    "FlowNotFoundError",
    "OverlayStore",
    "SteerableWorker",
    "cluster_keys",
    "flow_keys",
    "layered",
]

#: settings a running flow takes without restarting its tasks
FILTER_KEYS = frozenset({"topics", "topics.exclude"})


class FlowNotFoundError(LookupError):
    pass


class FlowExistsError(ValueError):
    pass


class ClusterConflictError(ValueError):
    pass


def _value(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    raise ConfigError(
        f"invalid value for {key!r}: expected a string, number, boolean or list of strings", key
    )


def flow_keys(name: str, settings: Mapping[str, Any]) -> dict[str, str]:
    """Flat keys for settings of flow ``name`` (``{"topics": ["a"]}`` -> ``{"A->B.topics": "a"}``)."""
    out = {}
    for key, value in settings.items():
        if not key or key.startswith(".") or "->" in key:
            raise ConfigError(f"invalid setting name {key!r}", key)
        out[f"{name}.{key}"] = _value(f"{name}.{key}", value)
    return out


def cluster_keys(config: MirrorMakerConfig, clusters: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """Flat keys adding ``clusters`` (alias -> connection settings) to ``config``.

    An alias already known must come with the same bootstrap servers: clusters under running flows
    are not re-pointed.
    """
    known = list(config.clusters)
    out: dict[str, Any] = {}
    for alias, props in clusters.items():
        servers = props.get("bootstrap.servers", "")
        if alias in config.clusters:
            if servers and servers != config.clusters[alias].bootstrap_servers:
                raise ClusterConflictError(
                    f"cluster {alias!r} is already {config.clusters[alias].bootstrap_servers}; "
                    f"it cannot be re-pointed to {servers} while the worker runs"
                )
            continue
        if not servers:
            key = f"{alias}.bootstrap.servers"
            raise ConfigError(f"missing required key {key!r}", key)
        known.append(alias)
        for key, value in props.items():
            out[f"{alias}.{key}"] = _value(f"{alias}.{key}", value)
    if len(known) > len(config.clusters):
        out["clusters"] = ",".join(known)
    return out


def layered(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> MirrorMakerConfig:
    """The configuration with the overlay's keys over the base keys (validated as a whole)."""
    merged = dict(base)
    merged.update(overlay)
    return MirrorMakerConfig.from_flat(merged)


class OverlayStore:
    """The overlay in a JSON file (written atomically), or nowhere when no path is given."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path is not None else None

    def load(self) -> dict[str, Any]:
        if self.path is None or not self.path.exists():
            return {}
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"state file {self.path} is unreadable: {exc}") from None
        keys = doc.get("keys") if isinstance(doc, dict) else None
        if not isinstance(keys, dict):
            raise ConfigError(f"state file {self.path} has no 'keys' object")
        return keys

    def save(self, overlay: Mapping[str, Any]) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".mm2py-state-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": 1, "keys": dict(overlay)}, f, indent=2, sort_keys=True)
                f.write("\n")
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class FlowHandle(Protocol):
    """What a runtime's per-flow runner offers for steering (``FlowRunner``, ``SparkFlowRunner``)."""

    flow: FlowConfig

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def refresh(self) -> Any: ...

    def set_topic_filter(self, topic_filter: TopicFilter) -> None: ...


R = TypeVar("R", bound=FlowHandle)


class SteerableWorker(Generic[R]):
    """Adding, changing, restarting and removing flows of a running worker (both runtimes).

    A runtime calls :meth:`_init_steering` first and implements :meth:`_new_runner`; changes are
    serialised by one lock and written to the state file before they take effect.
    """

    flows: dict[str, R]
    config: MirrorMakerConfig
    _started: bool

    def _init_steering(self, config: MirrorMakerConfig, state_file: str | None) -> MirrorMakerConfig:
        self.base_keys = dict(config.source_keys)
        self.store = OverlayStore(state_file)
        self.overlay = self.store.load()
        self.config = layered(self.base_keys, self.overlay) if self.overlay else config
        self._steer_lock = asyncio.Lock()
        self._started = False
        return self.config

    def _new_runner(self, flow: FlowConfig) -> R:
        raise NotImplementedError

    def _flow_added(self, flow: FlowConfig) -> None:
        """Hook: a flow was added while running (e.g. to start its heartbeats)."""

    def flow(self, name: str) -> R:
        try:
            return self.flows[name]
        except KeyError:
            running = ", ".join(self.flows) or "none"
            raise FlowNotFoundError(f"no running flow {name!r} (running: {running})") from None

    async def add_flow(
        self, source: str, target: str, settings: Mapping[str, Any],
        clusters: Mapping[str, Mapping[str, str]] | None = None,
    ) -> R:
        """Start ``source->target`` with ``settings`` (MM2 names); new clusters may come with it."""
        name = f"{source}->{target}"
        async with self._steer_lock:
            if name in self.flows:
                raise FlowExistsError(f"flow {name!r} is already running")
            keys = cluster_keys(self.config, clusters or {})
            layered(self.base_keys, {**self.overlay, **keys}).flow(source, target)  # unknown cluster?
            keys.update(flow_keys(name, {**settings, "enabled": True}))
            config = layered(self.base_keys, {**self.overlay, **keys})
            runner = self._new_runner(config.flows[name])
            if self._started:
                try:
                    await runner.start()
                except BaseException:
                    await runner.stop()
                    raise
            self._commit_overlay({**self.overlay, **keys}, config)
            self.flows[name] = runner
            self._flow_added(runner.flow)
            return runner

    async def update_flow(self, name: str, settings: Mapping[str, Any]) -> R:
        """Change settings of a running flow: topic lists in place, anything else by a restart."""
        async with self._steer_lock:
            runner = self.flow(name)
            keys = flow_keys(name, settings)
            config = layered(self.base_keys, {**self.overlay, **keys})
            flow = config.flows[name]
            self._commit_overlay({**self.overlay, **keys}, config)
            if set(settings) <= FILTER_KEYS:
                runner.flow = flow
                runner.set_topic_filter(flow.topic_filter())
                await runner.refresh()
                return runner
            return await self._replace(runner, flow)

    async def restart_flow(self, name: str) -> R:
        """Stop the flow (its tasks commit their progress) and start it again, e.g. after a failure."""
        async with self._steer_lock:
            runner = self.flow(name)
            return await self._replace(runner, runner.flow)

    async def remove_flow(self, name: str) -> None:
        """Stop the flow and disable it; its progress stays on the target for a later restart."""
        async with self._steer_lock:
            runner = self.flow(name)
            keys = {f"{name}.enabled": "false"}
            self._commit_overlay({**self.overlay, **keys}, layered(self.base_keys, {**self.overlay, **keys}))
            del self.flows[name]
            await runner.stop()

    async def _replace(self, runner: R, flow: FlowConfig) -> R:
        await runner.stop()
        fresh = self._new_runner(flow)
        self.flows[flow.name] = fresh
        if self._started:
            await fresh.start()
        return fresh

    def _commit_overlay(self, overlay: dict[str, Any], config: MirrorMakerConfig) -> None:
        self.store.save(overlay)
        self.overlay, self.config = overlay, config
