"""Kafka-backed stores (confluent-kafka): the admin client, the position store, the offset-sync
writer and the topic tail reader."""
