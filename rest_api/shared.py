"""What the REST API's three parts (``flows/``, ``connect/``, ``ui/``) share: the worker they steer,
and which settings are secrets, shown back as ``[hidden]``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mm2py.runtime.flows import FlowRunnerBase
from mm2py.runtime.worker_base import WorkerBase

__all__ = ["HIDDEN", "AnyRunner", "AnyWorker", "is_secret", "redacted"]

#: a worker of any runtime (the in-process ``Worker``, the ``SparkWorker``) and its flow runners
AnyWorker = WorkerBase[Any]
AnyRunner = FlowRunnerBase[Any]

#: setting names whose values are not shown back (credentials)
_SECRET_KEY = re.compile(r"password|secret|jaas|token|credential|keystore\.key", re.IGNORECASE)
#: what a secret's value is shown as
HIDDEN = "[hidden]"


def is_secret(key: str) -> bool:
    """Whether the setting ``key`` holds a credential (its value is never shown)."""
    return _SECRET_KEY.search(key) is not None


def redacted(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` to show: each secret's value :data:`HIDDEN`, nested mappings likewise, tuples as
    lists (JSON)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out[key] = redacted(value)
        elif is_secret(key):
            out[key] = HIDDEN
        else:
            out[key] = list(value) if isinstance(value, tuple) else value
    return out
