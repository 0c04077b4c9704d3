"""Whether a cluster still refuses connections, asked of it directly.

The admin client learns that every broker refuses us from librdkafka's error callback, but
librdkafka reports an identical refusal once and then holds it back for 30 s (it counts the
"identical error(s) suppressed"). So once ``mm2py.unreachable.timeout.ms`` has passed without a
fresh report, :func:`accepts_connections` asks the bootstrap addresses themselves: none accepting a
TCP connection now means the cluster is still unreachable, and the call fails at once with the
broker's reason instead of after ``admin.timeout.ms`` (or 30 s late on a loaded machine).
"""

from __future__ import annotations

import socket

__all__ = ["accepts_connections"]


def accepts_connections(bootstrap: str, timeout: float = 0.5) -> bool:
    """Whether some address of a bootstrap list accepts a TCP connection (an address it cannot
    read counts as one that may)."""
    for entry in bootstrap.split(","):
        host, _, port = entry.strip().rpartition("://")[2].rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout):
                return True
        except ValueError:
            return True
        except OSError:
            continue
    return False
