"""The ``/flows`` API: a worker's mirror flows created, read, changed, paused, stopped, resumed,
restarted and removed; their source positions read and reset; consumer groups moved to a flow's
target. Errors are ``{"error", "key"}`` bodies."""
