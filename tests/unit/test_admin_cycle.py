"""A ClusterAdmin is freed with its last reference, not left to the garbage collector.

librdkafka aborts the process when a client is destroyed on one of its own threads, and a
collection can run on any thread that calls into Python, librdkafka's callback threads included.
So a ClusterAdmin must not sit in a reference cycle (it did: its AdminClient held its bound
``error_cb``). No broker is needed: creating the client does not connect.
"""

from __future__ import annotations

import gc
import weakref

from mm2py.rdkafka.admin import ClusterAdmin


def test_a_dropped_admin_is_freed_at_once_without_a_collection() -> None:
    gc.disable()
    try:
        admin = ClusterAdmin("east", "127.0.0.1:1")
        gone = weakref.ref(admin)
        del admin
        assert gone() is None, "ClusterAdmin is in a reference cycle: only the GC (any thread) frees it"
    finally:
        gc.enable()
