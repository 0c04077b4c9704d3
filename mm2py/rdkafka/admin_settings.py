"""``<alias>.admin.*`` overrides (MirrorMaker 2's Java admin-client names) for confluent-kafka's admin client.

Settings librdkafka knows under the same name and meaning pass through; ``request.timeout.ms``
becomes librdkafka's ``socket.timeout.ms`` (the timeout of one network request) and
``default.api.timeout.ms`` bounds each admin call, as ``admin.timeout.ms`` does for the whole flow.
Connection security (``security.protocol``, ``ssl.*``, ``sasl.*``) is read by
:mod:`mm2py.config.security`. Anything else is reported once as ignored. A value that is not a
non-negative integer is a configuration error naming its MM2 key.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mm2py.config.errors import ConfigError
from mm2py.config.flat import is_connection_key
from mm2py.config.models import FlowConfig
from mm2py.config.security import Side, key_origin

__all__ = ["AdminSettings", "admin_settings"]

log = logging.getLogger(__name__)

#: Java admin-client settings with the same name and meaning in librdkafka (all integers)
_SAME_IN_LIBRDKAFKA = frozenset({
    "metadata.max.age.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms", "retry.backoff.ms",
    "retry.backoff.max.ms", "socket.connection.setup.timeout.ms", "connections.max.idle.ms",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
})
_RENAMED = {"request.timeout.ms": "socket.timeout.ms"}
_reported: set[tuple[str, str]] = set()  # (flow, side) whose ignored keys were logged


@dataclass(frozen=True)
class AdminSettings:
    librdkafka: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None  # seconds, from default.api.timeout.ms
    ignored: tuple[str, ...] = ()


def admin_settings(flow: FlowConfig, side: Side) -> AdminSettings:
    """The admin-client overrides of ``flow``'s ``side``, as librdkafka settings."""
    origin = key_origin(flow, side, "admin")
    out: dict[str, str] = {}
    timeout: float | None = None
    ignored: list[str] = []
    for key, value in sorted(flow.client_config(side, "admin").items()):
        if is_connection_key(key):
            continue  # bootstrap servers and security: read elsewhere
        if key == "client.id":
            out[key] = str(value)
        elif key in _SAME_IN_LIBRDKAFKA or key in _RENAMED:
            out[_RENAMED.get(key, key)] = str(_non_negative(value, origin(key)))
        elif key == "default.api.timeout.ms":
            timeout = _non_negative(value, origin(key)) / 1000
        else:
            ignored.append(origin(key))
    if ignored and (flow.name, side) not in _reported:
        _reported.add((flow.name, side))
        log.warning("%s: admin client settings not used by mm2py (ignored): %s",
                    flow.name, ", ".join(ignored))
    return AdminSettings(out, timeout, tuple(ignored))


def _non_negative(value: object, key: str) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"invalid value for {key!r}: expected an integer, got {value!r}", key) from None
    if n < 0:
        raise ConfigError(f"invalid value for {key!r}: must be >= 0, got {n}", key)
    return n
