"""mm2py: a MirrorMaker 2 port that mirrors raw Kafka RecordBatch bytes."""

__version__ = "0.1.0"
