"""The worker's state file (``--state-file``): the run-time changes a worker keeps across restarts.

The file holds the overlay ``keys`` (run-time changes as MM2 keys, :mod:`.steering`) and named
``sections`` that are not configuration: the flows kept paused or stopped (``states``: the on-disk
name of the halted flows), the Kafka Connect facade's connectors (``connectors``) and the halted
checkpoint and heartbeat connectors (``connector_states``), the flows with names of their own
(``flows``, :mod:`.named_flows`) and each flow's active topics (``topics``). A section a file lacks
(written by an older mm2py) reads as empty.

One owner writes it: the worker, while it holds its steering lock (``WorkerBase._write_state_file``).
:meth:`StateFile.write` refuses to write otherwise, so a change made beside the worker's (the
Connect facade's, the data path's active topics) cannot write a file that another change is half
way through; each goes through ``WorkerBase.edit_state_file``, which takes the lock.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from mm2py.config.errors import ConfigError
from mm2py.runtime.steering import SteeringError

__all__ = ["StateFile", "StateFileLockError"]


class StateFileLockError(SteeringError, RuntimeError):
    """A change that was about to write the state file without the worker's steering lock."""


class StateFile:
    """The state file in JSON (written atomically), or nowhere when no path is given. ``lock``: the
    worker's steering lock, held by every :meth:`write`."""

    def __init__(self, path: str | os.PathLike[str] | None, lock: asyncio.Lock) -> None:
        self.path = Path(path) if path is not None else None
        self.sections: dict[str, dict[str, Any]] = {}
        self._lock = lock
        self._pending: asyncio.Task[Any] | None = None

    def load(self) -> dict[str, Any]:
        """The overlay keys; the sections are read into :attr:`sections`."""
        if self.path is None or not self.path.exists():
            return {}
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"state file {self.path} is unreadable: {exc}") from None
        keys = doc.get("keys") if isinstance(doc, dict) else None
        if not isinstance(keys, dict):
            raise ConfigError(f"state file {self.path} has no 'keys' object")
        sections = doc.get("sections", {})
        if not isinstance(sections, dict) or not all(isinstance(v, dict) for v in sections.values()):
            raise ConfigError(f"state file {self.path}: 'sections' must be an object of objects")
        self.sections = sections
        return keys

    def section(self, name: str) -> dict[str, Any]:
        """Section ``name``, created empty when the file has none (the same dict from then on)."""
        return self.sections.setdefault(name, {})

    def write(self, keys: Mapping[str, Any]) -> None:
        """The file as it is now: ``keys`` and every section (only while the lock is held)."""
        if not self._lock.locked():
            raise StateFileLockError("the state file is written only by the worker, under its steering lock")
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".mm2py-state-", dir=self.path.parent)
        doc = {"version": 1, "keys": dict(keys), "sections": self.sections}
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=2, sort_keys=True)
                f.write("\n")
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def write_soon(self, write: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Start ``write`` (the worker's: it takes the lock and writes) in a task, unless one
        started before has not written yet: that one writes what is new by then."""
        if self._pending is None or self._pending.done():
            self._pending = asyncio.get_running_loop().create_task(write())

    async def written(self) -> None:
        """Wait for the write :meth:`write_soon` started last (as the worker stops)."""
        if self._pending is not None:
            await self._pending
