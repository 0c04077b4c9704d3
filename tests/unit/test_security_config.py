"""MM2/Java security properties -> raw client SecurityConfig and librdkafka properties.

Errors name the key where the setting was written, and never show a password."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mm2py.config.errors import ConfigError
from mm2py.config.models import MirrorMakerConfig
from mm2py.config.security import cluster_security, parse_jaas_config, parse_security
from mm2py.connectors.client_settings import raw_client_settings
from mm2py.kafka_local.security import TlsFiles, generate_tls_files
from mm2py.rdkafka.admin import librdkafka_config

SCRAM = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
         'username="alice" password="alice-secret";')
PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="b0b";'


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return generate_tls_files(tmp_path_factory.mktemp("tls"), "key-pw")


def sasl_ssl(tls: TlsFiles, **extra: str) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM,
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls.ca), **extra}


def error(props: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_security(props, "east")
    assert "alice-secret" not in str(info.value)
    return info.value


# ------------------------------------------------------------------------------- translation


def test_plaintext_by_default() -> None:
    sec = parse_security({}, "east")
    assert sec.protocol == "PLAINTEXT" and sec.librdkafka() == {"security.protocol": "PLAINTEXT"}
    raw = sec.security_config()
    assert (raw.ssl_context, raw.authenticator, raw.protocol) == (None, None, "PLAINTEXT")


def test_plaintext_ignores_tls_and_sasl_settings() -> None:
    sec = parse_security({"ssl.truststore.location": "/nowhere.jks", "sasl.mechanism": "GSSAPI"}, "east")
    assert sec.protocol == "PLAINTEXT"


def test_sasl_ssl_scram_with_a_pem_truststore(tls: TlsFiles) -> None:
    sec = parse_security(sasl_ssl(tls, **{"security.protocol": "sasl_ssl"}), "east")
    assert sec.librdkafka() == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
        "sasl.password": "alice-secret", "ssl.ca.location": str(tls.ca),
        "ssl.endpoint.identification.algorithm": "https",
    }
    raw = sec.security_config()
    assert raw.protocol == "SASL_SSL" and raw.name == "east"
    assert raw.ssl_context is not None and raw.ssl_context.check_hostname
    auth: Any = raw.authenticator
    assert (auth.mechanism, auth.username, auth.cluster) == ("SCRAM-SHA-512", "alice", "east")
    assert "alice-secret" not in repr(sec) + repr(auth)


def test_sasl_plaintext_plain() -> None:
    sec = parse_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                          "sasl.jaas.config": PLAIN}, "east")
    assert sec.librdkafka() == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                "sasl.username": "bob", "sasl.password": "b0b"}
    assert sec.security_config().ssl_context is None


def test_inline_truststore_and_no_hostname_verification(tls: TlsFiles) -> None:
    pem = tls.ca.read_text()
    props = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": pem,
             "ssl.endpoint.identification.algorithm": ""}
    sec = parse_security(props, "east")
    conf = sec.librdkafka()
    assert conf["ssl.ca.pem"] == pem.strip() and conf["ssl.endpoint.identification.algorithm"] == "none"
    ctx = sec.security_config().ssl_context
    assert ctx is not None and not ctx.check_hostname


def test_mtls_keystore_file_and_inline(tls: TlsFiles, tmp_path: Path) -> None:
    keystore = tmp_path / "client.pem"
    keystore.write_text(tls.client_key.read_text() + tls.client_cert.read_text())
    base = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls.ca),
            "ssl.keystore.type": "PEM", "ssl.key.password": "key-pw"}
    by_file = parse_security({**base, "ssl.keystore.location": str(keystore)}, "east")
    assert by_file.security_config().ssl_context is not None
    conf = by_file.librdkafka()
    assert conf["ssl.certificate.location"] == conf["ssl.key.location"] == str(keystore)
    assert conf["ssl.key.password"] == "key-pw"
    inline = parse_security({**base, "ssl.keystore.certificate.chain": tls.client_cert.read_text(),
                             "ssl.keystore.key": tls.client_key.read_text()}, "east")
    assert inline.security_config().ssl_context is not None
    conf = inline.librdkafka()
    assert conf["ssl.certificate.pem"].startswith("-----BEGIN CERTIFICATE")
    assert "ENCRYPTED PRIVATE KEY" in conf["ssl.key.pem"]


def test_unapplied_tls_settings_are_reported_as_ignored(tls: TlsFiles) -> None:
    extra = {"ssl.cipher.suites": "x", "sasl.login.refresh.buffer.seconds": "1"}
    sec = parse_security(sasl_ssl(tls, **extra), "east")
    assert sec.ignored == ("sasl.login.refresh.buffer.seconds", "ssl.cipher.suites")


# ------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(("change", "key", "text"), [
    ({"security.protocol": "SASL_TLS"}, "security.protocol", "expected one of"),
    ({"sasl.mechanism": "GSSAPI"}, "sasl.mechanism", "GSSAPI (Kerberos) is not supported"),
    ({"sasl.mechanism": "DIGEST-MD5"}, "sasl.mechanism", "DIGEST-MD5 is not supported"),
    ({"sasl.mechanism": "OAUTHBEARER"}, "sasl.jaas.config", "needs login module"),
    ({"sasl.mechanism": ""}, "sasl.mechanism", "no sasl.mechanism is set"),
    ({"sasl.jaas.config": ""}, "sasl.jaas.config", "needs the login module"),
    ({"sasl.mechanism": "PLAIN"}, "sasl.jaas.config", "needs login module"),
    ({"sasl.jaas.config": SCRAM.replace(' password="alice-secret"', "")}, "sasl.jaas.config", "lack"),
    ({"sasl.jaas.config": SCRAM.rstrip(";")}, "sasl.jaas.config", "expected"),
    ({"sasl.jaas.config": SCRAM.replace('t";', "t;")}, "sasl.jaas.config", "unterminated"),
    ({"sasl.jaas.config": SCRAM + SCRAM}, "sasl.jaas.config", "only one login module"),
    ({"ssl.truststore.type": "JKS"}, "ssl.truststore.type", "set ssl.truststore.type=PEM"),
    ({"ssl.truststore.type": ""}, "ssl.truststore.type", "JKS cannot be read"),
    ({"ssl.truststore.location": "/no/such/ca.pem"}, "ssl.truststore.location", "no readable file"),
    ({"ssl.truststore.password": "x"}, "ssl.truststore.password", "no store password"),
    ({"ssl.truststore.certificates": "x"}, "ssl.truststore.certificates", "not both"),
    ({"ssl.keystore.location": "/k.p12", "ssl.keystore.type": "PKCS12"}, "ssl.keystore.type", "PKCS12"),
    ({"ssl.keystore.key": "x"}, "ssl.keystore.certificate.chain", "go together"),
    ({"ssl.endpoint.identification.algorithm": "http"}, "ssl.endpoint.identification.algorithm", "'https'"),
])
def test_invalid_settings_name_their_key(
    tls: TlsFiles, change: dict[str, str], key: str, text: str
) -> None:
    err = error(sasl_ssl(tls, **change))
    assert err.key == f"east.{key}" and text in str(err)
    assert f"'east.{key}'" in str(err)


def test_unreadable_pem_contents_name_the_key(tls: TlsFiles, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    err = error(sasl_ssl(tls, **{"ssl.truststore.location": str(junk)}))
    assert err.key == "east.ssl.truststore.location"
    keystore = {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": tls.client_cert.read_text(),
                "ssl.keystore.key": tls.client_key.read_text()}
    err = error(sasl_ssl(tls, **keystore))  # encrypted key, no ssl.key.password
    assert err.key == "east.ssl.keystore.certificate.chain" and "encrypted" in str(err)
    err = error(sasl_ssl(tls, **keystore, **{"ssl.key.password": "wrong"}))
    assert err.key == "east.ssl.keystore.certificate.chain"


def test_jaas_parser() -> None:
    module, options = parse_jaas_config(
        'org.x.Module  REQUIRED a="x y" b=plain c="q\\"uote\\\\" d=\'single\';'
    )
    assert module == "org.x.Module"
    assert options == {"a": "x y", "b": "plain", "c": 'q"uote\\', "d": "single"}
    with pytest.raises(ValueError, match="control flag"):
        parse_jaas_config('org.x.Module mandatory a="b";')


# ------------------------------------------------------------------------- flows and clients


def flow_config(extra: dict[str, Any]) -> MirrorMakerConfig:
    return MirrorMakerConfig.from_flat({
        "clusters": "east, west", "east.bootstrap.servers": "e:9092", "west.bootstrap.servers": "w:9092",
        "east->west.enabled": "true", **extra,
    })


def test_errors_name_the_key_where_the_setting_was_written(tls: TlsFiles) -> None:
    cases = {
        "east.sasl.mechanism": "east.sasl.mechanism",
        "east->west.source.cluster.sasl.mechanism": "east->west.source.cluster.sasl.mechanism",
        "east.consumer.sasl.mechanism": "east.consumer.sasl.mechanism",
        "east->west.source.consumer.sasl.mechanism": "east->west.source.consumer.sasl.mechanism",
    }
    for written, named in cases.items():
        base = {f"east.{k}": v for k, v in sasl_ssl(tls).items() if k != "sasl.mechanism"}
        flow = flow_config({**base, written: "GSSAPI"}).flow("east", "west")
        with pytest.raises(ConfigError) as info:
            cluster_security(flow, "source", "consumer")
        assert info.value.key == named, written


def test_a_flow_hands_security_to_every_client(tls: TlsFiles) -> None:
    flow = flow_config({**{f"east.{k}": v for k, v in sasl_ssl(tls).items()},
                        "east.ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}).flow("east", "west")
    settings = raw_client_settings(flow, fetch_max_bytes=1 << 20)
    assert settings.source_client.connection.security.protocol == "SASL_SSL"
    assert settings.target_client.connection.security.protocol == "PLAINTEXT"
    assert "source.ssl.cipher.suites" in settings.ignored
    assert not any("sasl" in k or "truststore" in k for k in settings.ignored)
    conf = librdkafka_config(flow, "source", "producer", {"acks": "all"})
    assert (conf["bootstrap.servers"], conf["sasl.username"], conf["acks"]) == ("e:9092", "alice", "all")
    assert librdkafka_config(flow, "target")["security.protocol"] == "PLAINTEXT"


def test_librdkafka_clients_start_with_a_short_reconnect_backoff_that_an_override_replaces() -> None:
    flow = flow_config({}).flow("east", "west")
    assert librdkafka_config(flow, "source", "consumer")["reconnect.backoff.ms"] == 10
    overridden = librdkafka_config(flow, "target", "producer", {"reconnect.backoff.ms": 250})
    assert overridden["reconnect.backoff.ms"] == 250
