"""A change of one flow's settings as a typed patch: :class:`FlowPatch`.

Every run-time change of a flow — ``PATCH /flows/{name}``, a Connect connector's config ``PUT`` or
``PATCH``, a checkpoint or heartbeat connector created, halted or deleted — is a ``FlowPatch``: the
settings to set, by MM2's names, and which settings given at run time before to forget first (a
Connect ``PUT .../config`` replaces). The worker applies it to the flow's typed configuration once
(``FlowConfig.patched``: each value validated as its setting's type, an error naming
``<flow>.<key>``), and decides what to do — in place, or a restart — from :func:`changed_settings`,
the settings whose typed values differ. What the state file keeps of it is :meth:`FlowPatch.text`:
MM2 keys, as ``mm2.properties`` would have them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mm2py.config.errors import ConfigError
from mm2py.config.settings import FlowSettings

__all__ = ["FlowPatch", "Forget", "changed_settings", "setting_text"]


def setting_text(key: str, value: Any) -> str:
    """``value`` as MM2's text (``True`` -> ``"true"``, a list comma-joined); ``key`` names it in
    the error for anything else."""
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


class Forget(BaseModel):
    """Which of a flow's settings given at run time before a patch forgets (they fall back to the
    configuration file's, or the default): those in ``names``, or, with ``all_but``, every one not
    in it. ``enabled`` is never forgotten."""

    model_config = ConfigDict(frozen=True)

    names: frozenset[str] = frozenset()
    all_but: frozenset[str] | None = None

    def __call__(self, name: str) -> bool:
        if name == "enabled":
            return False
        return name not in self.all_but if self.all_but is not None else name in self.names

    @property
    def anything(self) -> bool:
        return bool(self.names) or self.all_but is not None


class FlowPatch(BaseModel):
    """A change of one flow's settings: ``values`` by MM2's names (``topics``, ``tasks.max``,
    ``consumer.max.poll.records``...; JSON scalars or lists of strings), set after the earlier
    run-time settings ``forget`` selects are dropped."""

    model_config = ConfigDict(frozen=True)

    values: dict[str, Any] = Field(default_factory=dict)
    forget: Forget = Forget()

    def text(self, flow: str) -> dict[str, str]:
        """The values as MM2 text, by setting name (what the state file keeps); a name that could
        reach another flow's keys, or a value that is no scalar, is refused naming
        ``<flow>.<key>``."""
        out = {}
        for key, value in self.values.items():
            if not key or key.startswith(".") or "->" in key:
                raise ConfigError(f"invalid setting name {key!r}", key)
            out[key] = setting_text(f"{flow}.{key}", value)
        return out

    def over(self, flow: str, earlier: Mapping[str, str]) -> dict[str, str]:
        """A flow's run-time settings after this patch: ``earlier`` without those it forgets, with
        its values over them."""
        kept = {k: v for k, v in earlier.items() if not self.forget(k)}
        return {**kept, **self.text(flow)}

    def forgets_any(self, earlier: Mapping[str, str]) -> bool:
        return self.forget.anything and any(self.forget(k) for k in earlier)

    def enabling(self) -> FlowPatch:
        """This patch, also enabling the flow (an unnamed flow created at run time)."""
        return self.model_copy(update={"values": {**self.values, "enabled": True}})


def changed_settings(old: FlowSettings, new: FlowSettings) -> frozenset[str]:
    """The settings (MM2 names; ``client_overrides`` and the like by field name) whose typed values
    differ between two configurations of one flow, ``enabled`` aside."""
    return frozenset(f.alias or name for name, f in type(new).model_fields.items()
                     if name != "enabled" and getattr(old, name) != getattr(new, name))
