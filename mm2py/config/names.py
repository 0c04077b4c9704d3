"""Flow names: a pair's name (``east->west``, also its unnamed flow's), and the rules for the names
of a pair's other flows (Kafka Connect connector names such as ``mirror-east-west-fast``)."""

from __future__ import annotations

import re

from mm2py.config.errors import ConfigError

__all__ = ["DEFAULT_CONNECTOR", "check_flow_name", "pair_name"]

#: the connector name keying the positions of a pair's unnamed flow (MM2's, so its records are shared)
DEFAULT_CONNECTOR = "MirrorSourceConnector"
_NAME_CHARS = re.compile(r"^[^/\\\s\x00-\x1f][^/\\\x00-\x1f]{0,198}$")


def pair_name(source: str, target: str) -> str:
    """The name of a cluster pair, and of its unnamed flow: ``source->target``."""
    return f"{source}->{target}"


def check_flow_name(name: str, source: str, target: str) -> str:
    """A flow's own name, checked: Connect-style names (``mirror-east-west-fast``) or the pair's
    own ``source->target``; no ``/`` or ``\\`` (it is one URL path segment), no control
    characters, no leading or trailing space, no other pair's name (``->`` only as the pair's)."""
    if name != name.strip() or not _NAME_CHARS.match(name):
        raise ConfigError(f"invalid flow name {name!r}: 1-199 characters, no '/', '\\', control "
                          "characters or leading/trailing spaces", "name")
    if "->" in name and name != pair_name(source, target):
        raise ConfigError(f"invalid flow name {name!r}: only the flow named after its own pair "
                          f"({pair_name(source, target)!r}) may contain '->'", "name")
    return name
