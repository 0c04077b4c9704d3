"""``/flows`` addresses a flow by its name; a pair-shaped path is a shorthand (pure ASGI).

A flow is ``/flows/{name}`` (``/flows/mirror-east-west-fast/config``, a pair's unnamed flow
``/flows/east->west``). The older pair-shaped paths stay: ``/flows/east/west[/...]`` is rewritten
to ``/flows/east->west[/...]`` before routing, and the worker reads a pair's name as the pair's
unnamed flow, or its only flow (a pair with several is addressed by name: 409). A two-segment path
whose second segment is one of the per-flow actions (``config``, ``pause``, ...) is a named flow's
action, not a pair; the consumer-group routes (``/flows/{source}/{target}/groups/...``) belong to
the pair and are left as they are.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.types import ASGIApp, Receive, Scope, Send

from mm2py.config.models import pair_name

__all__ = ["ACTIONS", "PairPaths"]

#: what follows a flow's name in a path (so ``/flows/{name}/{action}`` is not read as a pair)
ACTIONS = frozenset({"config", "restart", "pause", "stop", "resume", "offsets", "translate"})


def rewritten(path: str) -> str | None:
    """The named form of a pair-shaped ``/flows`` path; None for any other path."""
    parts = path.split("/")
    if len(parts) < 4 or parts[:2] != ["", "flows"] or not parts[2] or not parts[3]:
        return None
    if len(parts) == 4 and parts[3] in ACTIONS:
        return None  # /flows/{name}/{action}
    if len(parts) > 4 and parts[4] == "groups":
        return None  # the pair's consumer-group routes
    return "/".join(["", "flows", pair_name(parts[2], parts[3]), *parts[4:]])


class PairPaths:
    """Rewrites pair-shaped ``/flows`` paths to their named form (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (path := rewritten(scope.get("path", ""))) is not None:
            scope = {**scope, "path": path, "raw_path": quote(path, safe="/->").encode()}
        await self.app(scope, receive, send)
