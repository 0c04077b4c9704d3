"""The REST API's security settings read from a worker configuration with Kafka Connect's keys:
listeners, the ``listeners.https.`` prefix read all or nothing, the JAAS file found as Connect's
worker finds it, and Connect's JAAS syntax."""

from __future__ import annotations

from pathlib import Path

import pytest

from mm2py.config.errors import ConfigError
from mm2py.config.models import MirrorMakerConfig
from mm2py.rest_api.security.basic import PROPERTY_FILE_MODULE, BasicAuth, parse_basic, parse_jaas
from mm2py.rest_api.security.settings import (
    BASIC_AUTH_EXTENSION,
    jaas_file_from_kafka_opts,
    parse_listeners,
    rest_settings,
)

CLUSTERS = {"clusters": "east, west", "east.bootstrap.servers": "e:1", "west.bootstrap.servers": "w:1"}


def test_listeners_as_connect_writes_them() -> None:
    listeners = parse_listeners("http://:8083, HTTPS://[::1]:8443,https://mirror.example:0")
    assert [(lst.scheme, lst.host, lst.port) for lst in listeners] == [
        ("http", "0.0.0.0", 8083), ("https", "::1", 8443), ("https", "mirror.example", 0)]
    assert [lst.loopback for lst in listeners] == [False, True, False]
    assert listeners[1].url() == "https://[::1]:8443"
    for bad in ("ftp://:21", "localhost:8083", "http://:99999"):
        with pytest.raises(ConfigError, match="listeners"):
            parse_listeners(bad)


def test_no_listener_no_server_and_rest_port_adds_a_plain_one() -> None:
    assert rest_settings(CLUSTERS) is None
    settings = rest_settings({**CLUSTERS, "listeners": "https://:8443",
                              "listeners.https.ssl.keystore.location": "/k.pem"}, rest_port=8083)
    assert settings is not None
    assert [lst.url() for lst in settings.listeners] == ["https://0.0.0.0:8443", "http://127.0.0.1:8083"]


def test_https_settings_are_read_all_or_nothing_as_connect_reads_them() -> None:
    worker_ssl = {"ssl.keystore.location": "/worker.p12", "ssl.keystore.password": "w-pw",
                  "ssl.truststore.location": "/worker-trust.pem", "ssl.client.auth": "REQUIRED"}
    fallback = rest_settings({**CLUSTERS, "listeners": "https://:0", **worker_ssl})
    assert fallback is not None and fallback.tls is not None
    assert fallback.tls.keystore_location == "/worker.p12" and fallback.tls.client_auth == "required"
    assert fallback.tls.key("ssl.keystore.location") == "ssl.keystore.location"
    # one prefixed key: the worker's ssl.* are not read at all, not even the ones left out
    prefixed = rest_settings({**CLUSTERS, "listeners": "https://:0", **worker_ssl,
                              "listeners.https.ssl.keystore.location": "/rest.pem"})
    assert prefixed is not None and prefixed.tls is not None
    assert prefixed.tls.keystore_location == "/rest.pem"
    assert prefixed.tls.truststore_location is None and prefixed.tls.client_auth == "none"
    assert prefixed.tls.key("ssl.keystore.location") == "listeners.https.ssl.keystore.location"
    assert "w-pw" not in repr(fallback)  # passwords are SecretStr
    with pytest.raises(ConfigError, match=r"listeners\.https\.ssl\.client\.auth"):
        rest_settings({**CLUSTERS, "listeners": "https://:0", "listeners.https.ssl.client.auth": "maybe"})


def test_the_workers_configuration_accepts_the_rest_keys() -> None:
    config = MirrorMakerConfig.from_flat({
        **CLUSTERS, "listeners": "https://:8443", "listeners.https.ssl.keystore.location": "/k.pem",
        "rest.extension.classes": BASIC_AUTH_EXTENSION, "mm2py.rest.read.only.users": "viewer"})
    assert config.source_keys["mm2py.rest.read.only.users"] == "viewer"


def test_the_jaas_file_is_found_as_connects_worker_finds_it(tmp_path: Path) -> None:
    opts = '-Xmx1g -Djava.security.auth.login.config="/etc/kafka/rest jaas.conf" -Dother=1'
    assert jaas_file_from_kafka_opts(opts) == "/etc/kafka/rest jaas.conf"
    assert jaas_file_from_kafka_opts("-Xmx1g") is None and jaas_file_from_kafka_opts(None) is None
    keys = {**CLUSTERS, "listeners": "http://127.0.0.1:0", "rest.extension.classes": BASIC_AUTH_EXTENSION}
    with pytest.raises(ConfigError, match="KAFKA_OPTS"):
        rest_settings(keys)
    flag = rest_settings(keys, jaas_config="/flag.conf", kafka_opts=opts)
    assert flag is not None and flag.jaas_file == "/flag.conf" and flag.authenticates
    with pytest.raises(ConfigError, match="no Java REST extension"):
        rest_settings({**keys, "rest.extension.classes": "com.example.MyExtension"})
    with pytest.raises(ConfigError, match="--rest-jaas-config is read only with"):
        rest_settings({**CLUSTERS, "listeners": "http://:0"}, jaas_config="/flag.conf")


def test_connects_jaas_syntax_and_login_flags(tmp_path: Path) -> None:
    users, others = tmp_path / "users.properties", tmp_path / "others.properties"
    users.write_text("# Connect's users file\nadmin: s3cret\nviewer = v:pw\n")
    others.write_text("admin: other\n")
    sections = parse_jaas(f"""
        // another section first
        KafkaServer {{ org.example.Other optional debug=true; }};
        /* Connect's */ KafkaConnect {{
          {PROPERTY_FILE_MODULE} required
          file="{users}";
        }};""")
    assert [m.options for m in sections["KafkaConnect"]] == [{"file": str(users)}]
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(f'KafkaConnect {{ {PROPERTY_FILE_MODULE} required file="{users}"; }};')
    basic = BasicAuth(str(jaas))
    assert basic.check("admin", "s3cret") and basic.check("viewer", "v:pw")
    assert not basic.check("admin", "S3cret") and not basic.check("ghost", "")
    assert not basic.check("admin", "")
    users.write_text("admin: rotated\n")  # the users file is read again when it changes
    assert basic.check("admin", "rotated") and not basic.check("admin", "s3cret")
    jaas.write_text(f'KafkaConnect {{ {PROPERTY_FILE_MODULE} sufficient file="{others}";\n'
                    f'  {PROPERTY_FILE_MODULE} sufficient file="{users}"; }};')
    either = BasicAuth(str(jaas))
    assert either.check("admin", "other") and either.check("admin", "rotated")
    assert not either.check("admin", "x")
    jaas.write_text('KafkaConnect { com.example.LdapLoginModule required; };')
    with pytest.raises(ConfigError, match="PropertyFileLoginModule only"):
        BasicAuth(str(jaas))


def test_basic_headers() -> None:
    assert parse_basic("Basic YWRtaW46czNjcmV0") == ("admin", "s3cret")
    assert parse_basic("basic dTpwOnE=") == ("u", "p:q")
    for bad in ("Basic", "Basic %%%", "Basic dXNlcg==", "Bearer abc", ""):
        assert parse_basic(bad) is None
