"""The Spark runtime: the driver (:mod:`.driver`) is every flow's controller and leases the tasks;
executors (:mod:`.executor`) run them. :mod:`.wire` is what the two sides say to each other.
Nothing here imports the in-process runtime; executor modules import no driver module.
"""
