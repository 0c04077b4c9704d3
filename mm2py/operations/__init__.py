"""One-off operations against a flow's clusters, run on demand by the command line, the REST API or
the worker's own REST routes — none of them is the worker (:mod:`mm2py.runtime`):
``translator.py`` (a flow's offset syncs and positions read once, any offset translated both ways),
``failover.py`` and ``failback.py`` (consumer groups moved between the clusters),
``offsets_rewrite.py`` (offsets kept outside Kafka moved), ``flow_offsets.py`` (a flow's committed
source positions read, moved or forgotten) and ``audit/`` (a flow's partitions compared)."""
