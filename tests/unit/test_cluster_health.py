"""rdkafka/cluster_health, an admin client's view of its cluster: which librdkafka errors are the
cluster's refusal (a call fails at once, named as security) and which a dropped connection it
connects again after. No broker is needed: creating the client does not connect."""

from __future__ import annotations

from confluent_kafka import KafkaError

from mm2py.rdkafka.admin import ClusterAdmin


def test_a_handshake_cut_by_a_dropped_connection_is_not_a_refusal() -> None:
    """Seen under load on the OIDC cluster: the broker dropped the connection during the SASL
    handshake. Taken as a refusal, one busy moment failed the flow's start with ClusterSecurityError."""
    admin = ClusterAdmin("oe", "127.0.0.1:1")
    admin.health.on_error(KafkaError(KafkaError._AUTHENTICATION,
                               "sasl_ssl://127.0.0.1:1/1: SASL OAUTHBEARER mechanism handshake failed: "
                               "Local: Broker transport failure: broker's supported mechanisms: (n/a)"))
    assert admin.health.refused is None
    said = admin.health.last_error  # still said in an error, if the call gives up
    assert said is not None and "transport failure" in said


def test_a_refused_mechanism_or_certificate_is_a_refusal() -> None:
    for err in (KafkaError(KafkaError._AUTHENTICATION,
                           "SASL SCRAM-SHA-512 mechanism handshake failed: Broker: Unsupported SASL "
                           "mechanism: broker's supported mechanisms: PLAIN"),
                KafkaError(KafkaError._SSL, "SSL handshake failed: certificate verify failed")):
        admin = ClusterAdmin("east", "127.0.0.1:1")
        admin.health.on_error(err)
        assert admin.health.refused == err.str()
