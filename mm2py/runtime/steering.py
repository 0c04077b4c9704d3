"""Changes made to a running worker (REST), kept as MM2 keys layered over its configuration file.

A flow created over HTTP is nothing but ``east->west.enabled = true`` plus its settings under the
``east->west.`` prefix; a cluster added with it is ``clusters`` plus ``<alias>.bootstrap.servers``.
Layering those keys over the file's keys and validating the whole again gives the same errors,
defaults and precedence as the file itself. With a state file the layer survives restarts: the
worker writes it after every accepted change and reads it back at start (:mod:`.state_file`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mm2py.config.errors import ConfigError
from mm2py.config.models import MirrorMakerConfig
from mm2py.config.patch import FlowPatch, setting_text
from mm2py.errors import Mm2pyError

__all__ = [
    "FILTER_KEYS",
    "ClusterConflictError",
    "FlowConflictError",
    "FlowExistsError",
    "FlowNotFoundError",
    "FlowStateError",
    "cluster_keys",
    "flow_keys",
    "layered",
]

#: settings a running flow takes without restarting its tasks
FILTER_KEYS = frozenset({"topics", "topics.exclude"})


class SteeringError(Mm2pyError):
    """A run-time change that cannot be made as asked."""


class FlowNotFoundError(SteeringError, LookupError):
    """No running flow has that name."""


class FlowExistsError(SteeringError, ValueError):
    """A flow of that name runs already."""


class ClusterConflictError(SteeringError, ValueError):
    """A cluster alias given again with other connection settings than the running ones."""


class FlowConflictError(SteeringError, ValueError):
    """Two flows of one pair would mirror the same source topic (the message names both)."""


class FlowStateError(SteeringError):
    """The flow is not in a state that allows the change (e.g. offsets reset while it runs)."""


def flow_keys(name: str, settings: Mapping[str, Any]) -> dict[str, str]:
    """Flat keys for settings of flow ``name`` (``{"topics": ["a"]}`` -> ``{"A->B.topics": "a"}``)."""
    return {f"{name}.{k}": v for k, v in FlowPatch(values=dict(settings)).text(name).items()}


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
            out[f"{alias}.{key}"] = setting_text(f"{alias}.{key}", value)
    if len(known) > len(config.clusters):
        out["clusters"] = ",".join(known)
    return out


def layered(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> MirrorMakerConfig:
    """The configuration with the overlay's keys over the base keys (validated as a whole)."""
    merged = dict(base)
    merged.update(overlay)
    return MirrorMakerConfig.from_flat(merged)
