"""Kafka-backed stores (confluent-kafka): the position store, the progress topic's repair, the
offset-sync writer, the topic tail reader and the ``__consumer_offsets`` feed, on the admin client
of :mod:`mm2py.rdkafka`."""
