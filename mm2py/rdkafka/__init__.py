"""The confluent-kafka (librdkafka) admin side: the admin client and its settings, its plain values,
the cluster's health and reachability as librdkafka reports them, topic ACLs, librdkafka's log.
The topic-backed stores (``mm2py.stores``) stand on it; nothing here imports them."""
