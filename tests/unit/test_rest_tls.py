"""The REST API's server TLS context from Kafka Connect's ``ssl.*`` keys: PEM keystores in a file
(the key encrypted or not) or inline, PKCS12 truststores, client authentication, TLS versions."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from mm2py.config.errors import ConfigError
from mm2py.kafka_local.security import _pem, _pkcs8
from mm2py.rest_api.security.settings import TlsSettings, tls_settings
from mm2py.rest_api.security.tls import server_context
from tests.support.rest_security import Pki


def _tls(**keys: str) -> TlsSettings:
    return tls_settings({f"listeners.https.{k}": v for k, v in keys.items()})


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


def test_pem_keystores_in_a_file_encrypted_or_not_and_inline(pki: Pki, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    data = pki.server.read_bytes()
    key = load_pem_private_key(data, None)
    chain = data[data.index(b"-----BEGIN CERTIFICATE"):]
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(_pkcs8(key, "key-pw") + chain)  # type: ignore[arg-type]
    ctx = server_context(_tls(**{"ssl.keystore.location": str(encrypted), "ssl.key.password": "key-pw"}))
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2 and ctx.verify_mode == ssl.CERT_NONE
    with pytest.raises(ConfigError, match=r"listeners\.https\.ssl\.key\.password must be its password") as e:
        server_context(_tls(**{"ssl.keystore.location": str(encrypted), "ssl.key.password": "guess"}))
    assert "guess" not in str(e.value) and "key-pw" not in str(e.value)
    inline = _tls(**{"ssl.keystore.type": "PEM", "ssl.keystore.key": _pkcs8(key).decode(),  # type: ignore[arg-type]
                     "ssl.keystore.certificate.chain": chain.decode()})
    assert server_context(inline).verify_mode == ssl.CERT_NONE
    with pytest.raises(ConfigError, match=r"ssl\.keystore\.certificate\.chain"):
        server_context(_tls(**{"ssl.keystore.key": _pkcs8(key).decode()}))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs a keystore"):
        server_context(_tls(**{"ssl.client.auth": "required"}))


def test_truststores_and_client_authentication(pki: Pki, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.serialization import NoEncryption, pkcs12

    trust = tmp_path / "trust.p12"
    trust.write_bytes(pkcs12.serialize_key_and_certificates(b"ca", None, None, [pki.ca_cert], NoEncryption()))
    for client_auth, mode in (("requested", ssl.CERT_OPTIONAL), ("required", ssl.CERT_REQUIRED)):
        for store in ({"ssl.truststore.location": str(trust), "ssl.truststore.type": "PKCS12"},
                      {"ssl.truststore.location": str(pki.ca)},
                      {"ssl.truststore.certificates": _pem(pki.ca_cert).decode()}):
            keys = {"ssl.keystore.location": str(pki.server), "ssl.client.auth": client_auth, **store}
            ctx = server_context(_tls(**keys))
            assert ctx.verify_mode == mode
            assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "rest test CA"),),)]


def test_only_tls_1_2_and_up(pki: Pki) -> None:
    keystore = {"ssl.keystore.location": str(pki.server)}
    only13 = server_context(_tls(**keystore, **{"ssl.enabled.protocols": "TLSv1.3"}))
    assert only13.minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(ConfigError, match=r"TLSv1\.1"):
        server_context(_tls(**keystore, **{"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"}))
