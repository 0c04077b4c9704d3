"""One audit line per change made over the REST API: who, what, where, and how it ended.

Every request that may change something (any method but GET, HEAD and OPTIONS), refused or not,
writes one line to the ``mm2py.rest.audit`` logger at INFO::

    REST change: caller="alice" method=PATCH path=/flows/east->west status=200 client=10.0.0.7

The caller is the name authenticated (a user, a token's subject, a client certificate's subject),
``-`` when the request carried no valid credentials and ``anonymous`` when the API asks for none.
Credentials never appear: the line is built from these fields only, never from headers or bodies.
"""

from __future__ import annotations

import json
import logging

__all__ = ["AUDIT_LOGGER", "audit_change"]

AUDIT_LOGGER = "mm2py.rest.audit"
log = logging.getLogger(AUDIT_LOGGER)


def audit_change(caller: str, method: str, path: str, status: int, client: str | None) -> None:
    """Write the audit line of one change (``status`` 500 when the app failed)."""
    log.info("REST change: caller=%s method=%s path=%s status=%d client=%s",
             json.dumps(caller, ensure_ascii=False), method, json.dumps(path, ensure_ascii=False)[1:-1],
             status, client or "-")
