"""``/admin/loggers``: the process's Python logging levels, read and changed at run time (KIP-495).

As Kafka Connect's API has it: ``GET /admin/loggers`` lists every logger that exists (``root``
included, those turned ``OFF`` left out) with its level and when this API last changed it
(``last_modified``, milliseconds since the epoch, ``null`` if never); ``GET /admin/loggers/{name}``
shows one (404 for a logger that does not exist); ``PUT /admin/loggers/{name}`` with ``{"level":
"DEBUG"}`` sets the level of that logger (created if need be) and of every logger under it, and
answers the names of the loggers whose level changed. ``?scope=cluster`` answers 204 instead (a
worker is its own cluster here); any other scope is taken as ``worker``.

Levels are named as Connect names them (log4j's); in Python terms: ``OFF`` above ``CRITICAL``,
``FATAL`` is ``CRITICAL``, ``WARN`` is ``WARNING``, ``TRACE`` is 5 and ``ALL`` is 1. A level set
here is the logger's own (``Logger.setLevel``); a logger under it that has no level of its own
follows it, one with a level of its own gets the new one too.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import APIRouter, Response

from mm2py.rest_api.connect.errors import ConnectError, ConnectRoute

__all__ = ["LEVELS", "loggers_router"]

log = logging.getLogger(__name__)

#: Connect's level names and the Python levels they set
LEVELS: dict[str, int] = {"OFF": logging.CRITICAL + 10, "FATAL": logging.CRITICAL, "ERROR": logging.ERROR,
                          "WARN": logging.WARNING, "INFO": logging.INFO, "DEBUG": logging.DEBUG,
                          "TRACE": 5, "ALL": 1}
_ROOT = "root"


def level_name(level: int) -> str:
    """A Python level in Connect's words (a level between two names gets the lower one)."""
    return next((name for name, value in LEVELS.items() if level >= value), "ALL")


def _existing() -> dict[str, logging.Logger]:
    """Every logger created so far (placeholders of names no logger has are not loggers)."""
    found = {name: lg for name, lg in list(logging.root.manager.loggerDict.items())
             if isinstance(lg, logging.Logger)}
    found[_ROOT] = logging.getLogger()
    return found


def _is_root(name: str) -> bool:
    return name.lower() in (_ROOT, "")


class LoggerLevels:
    """Levels read and set, and when each logger's was last changed here."""

    def __init__(self) -> None:
        self.modified: dict[str, int] = {}

    def _shown(self, name: str, logger: logging.Logger) -> dict[str, Any]:
        return {"level": level_name(logger.getEffectiveLevel()), "last_modified": self.modified.get(name)}

    def all(self) -> dict[str, dict[str, Any]]:
        loggers = _existing()
        return {name: self._shown(name, loggers[name]) for name in sorted(loggers)
                if loggers[name].getEffectiveLevel() < LEVELS["OFF"]}

    def one(self, name: str) -> dict[str, Any]:
        loggers = _existing()
        key = _ROOT if _is_root(name) else name
        if key not in loggers:
            raise ConnectError(404, f"logger {name!r} not found")
        return self._shown(key, loggers[key])

    def set(self, namespace: str, level: str) -> list[str]:
        """``namespace`` and the loggers under it at ``level``; the names whose level changed."""
        before = _existing()
        if _is_root(namespace):
            top, under = _ROOT, [n for n in before if n != _ROOT]
        else:
            top, under = namespace, [n for n in before if n.startswith(namespace + ".")]
        levels = {n: before[n].getEffectiveLevel() for n in [top, *under] if n in before}
        value = LEVELS[level]
        logger = logging.getLogger() if top == _ROOT else logging.getLogger(top)
        logger.setLevel(value)
        for name in under:
            if before[name].level != logging.NOTSET:
                before[name].setLevel(value)
        now = int(time.time() * 1000)
        after = _existing()
        changed = sorted(n for n in [top, *under] if levels.get(n) != after[n].getEffectiveLevel())
        for name in changed:
            self.modified[name] = now
        log.info("log level of %s and the loggers under it set to %s (%d changed)", top, level, len(changed))
        return changed


def loggers_router() -> APIRouter:
    router = APIRouter(route_class=ConnectRoute, tags=["Kafka Connect facade"])
    levels = LoggerLevels()

    @router.get("/admin/loggers")
    async def list_loggers() -> dict[str, dict[str, Any]]:
        return levels.all()

    @router.get("/admin/loggers/{logger}")
    async def get_logger(logger: str) -> dict[str, Any]:
        return levels.one(logger)

    @router.put("/admin/loggers/{logger}", response_model=None)
    async def set_level(logger: str, body: dict[str, Any], scope: str = "worker") -> list[str] | Response:
        given = body.get("level")
        if given is None:
            raise ConnectError(400, "the request names no 'level'")
        level = str(given).strip().upper()
        if not level:
            raise ConnectError(500, "a level cannot be empty")  # Connect's answer too: a 500
        if level not in LEVELS:
            raise ConnectError(404, f"invalid log level {given!r}")  # Connect's status for it
        if scope.lower() not in ("worker", "cluster"):
            log.warning("scope %r of a log level change is not known; taken as 'worker'", scope)
        changed = levels.set(logger, level)
        if scope.lower() == "cluster":  # this worker is the whole cluster
            return Response(status_code=204)
        return changed

    return router
