"""Sans-IO Kafka protocol codec: pure functions over bytes/memoryview, no sockets."""
