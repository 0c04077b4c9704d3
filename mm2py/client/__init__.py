"""asyncio Kafka client for raw record batches: connections, metadata, routing, retries."""
