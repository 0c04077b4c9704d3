"""Secured client listeners for local test clusters: SASL_SSL, SASL_PLAINTEXT and SSL (mTLS).

A secured cluster keeps its PLAINTEXT listener (broker-internal traffic, the harness's readiness
check, test set-up) and adds one listener per requested protocol, named after the protocol. SASL
listeners accept PLAIN (users in the listener's JAAS config) and SCRAM-SHA-256/512 (credentials
written into the KRaft metadata log by ``kafka-storage format --add-scram``) and OAUTHBEARER: Kafka's
unsecured tokens by default, or with ``oauth_jwks_url`` signed JWTs checked by Kafka's
``OAuthBearerValidatorCallbackHandler`` against that JWKS (an identity provider such as
the tests' ``tests/support/oidc_provider.py``; the JVM must allow the URL, :func:`broker_jvm_args`).
``reauth_ms`` sets ``connections.max.reauth.ms`` (KIP-368 sessions). The SSL listener
requires a client certificate. A throwaway CA, broker certificate and client certificate are
generated at creation with the ``cryptography`` package (EC P-256, valid for a day).

With ``authorizer=True`` the nodes run Kafka's standard KRaft authorizer (``StandardAuthorizer``):
a request is allowed only by an ACL or to a super user. The PLAINTEXT and CONTROLLER listeners
(broker-internal traffic and the harness's own set-up, principal ``User:ANONYMOUS``) stay super
users; so are the SASL users named in ``super_users`` (e.g. a mirror's admin principal). Every
other SASL user can do only what ACLs allow.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

SECURED_PROTOCOLS = ("SASL_SSL", "SASL_PLAINTEXT", "SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_JWT_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
#: Kafka 4 reads OAUTHBEARER URLs (a JWKS) only when this JVM system property lists them
ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@dataclass(frozen=True)
class BrokerSecurity:
    """Which secured listeners a test cluster gets, and its SASL users (name -> password)."""

    listeners: tuple[str, ...] = ("SASL_SSL",)
    plain_users: Mapping[str, str] = field(default_factory=lambda: {"alice": "alice-secret"})
    scram_users: Mapping[str, str] = field(default_factory=lambda: {"alice": "alice-secret"})
    #: password protecting the client key file (``client.key``); None leaves it unencrypted
    client_key_password: str | None = "client-key-secret"
    #: run the standard authorizer (ACLs enforced; ``describe_acls`` answers instead of SECURITY_DISABLED)
    authorizer: bool = False
    #: SASL user names that bypass ACLs when ``authorizer`` is on (``User:ANONYMOUS`` always does)
    super_users: tuple[str, ...] = ()
    #: OAUTHBEARER tokens must be JWTs signed by a key of this JWKS (None: unsecured tokens pass)
    oauth_jwks_url: str | None = None
    #: ``connections.max.reauth.ms``: SASL sessions end after this long unless re-authenticated
    reauth_ms: int | None = None

    def __post_init__(self) -> None:
        unknown = [p for p in self.listeners if p not in SECURED_PROTOCOLS]
        if unknown or not self.listeners:
            raise ValueError(f"secured listeners must be among {SECURED_PROTOCOLS}, got {self.listeners}")
        if self.super_users and not self.authorizer:
            raise ValueError("super_users mean something only with authorizer=True")


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a secured cluster (all under ``directory``)."""

    directory: Path

    @property
    def ca(self) -> Path:
        """The CA certificate that signed the broker and client certificates."""
        return self.directory / "ca.pem"

    @property
    def other_ca(self) -> Path:
        """A CA that signed nothing here (for tests of a wrong trust store)."""
        return self.directory / "other-ca.pem"

    @property
    def broker_keystore(self) -> Path:
        """Broker private key (PKCS#8) followed by its certificate."""
        return self.directory / "broker.pem"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client-cert.pem"

    @property
    def client_key(self) -> Path:
        """Client private key (PKCS#8, encrypted when the cluster's ``client_key_password`` is set)."""
        return self.directory / "client.key"


def generate_tls_files(directory: Path, client_key_password: str | None) -> TlsFiles:
    """A fresh CA, a broker certificate for 127.0.0.1/localhost and a client certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    files = TlsFiles(directory)
    ca_key, ca_cert = _ca("mm2py test CA", now)
    _, other_cert = _ca("mm2py unrelated CA", now)
    broker_key, broker_cert = _leaf("broker", ca_key, ca_cert, now, server=True)
    client_key, client_cert = _leaf("mm2py-client", ca_key, ca_cert, now, server=False)
    files.ca.write_bytes(_pem(ca_cert))
    files.other_ca.write_bytes(_pem(other_cert))
    files.broker_keystore.write_bytes(_pkcs8(broker_key) + _pem(broker_cert))
    files.client_cert.write_bytes(_pem(client_cert))
    files.client_key.write_bytes(_pkcs8(client_key, client_key_password))
    for path in (files.broker_keystore, files.client_key):
        path.chmod(0o600)
    return files


# -- certificates (``cryptography`` is imported only when a secured cluster is made) ----------------
def _name(cn: str) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str, now: datetime.datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA certificate valid for a day, and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(
    cn: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, now: datetime.datetime,
    *, server: bool,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A server (for 127.0.0.1 and localhost) or client certificate signed by the CA, and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False)
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _pkcs8(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    from cryptography.hazmat.primitives import serialization

    enc: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def broker_properties(security: BrokerSecurity, tls: TlsFiles) -> dict[str, str]:
    """Listener, SASL and TLS settings to add to a node's ``server.properties``."""
    props: dict[str, str] = {}
    users = " ".join(f"user_{u}={_quote(p)}" for u, p in security.plain_users.items())
    for protocol in security.listeners:
        listener = protocol.lower()
        if protocol.startswith("SASL_"):
            props[f"listener.name.{listener}.plain.sasl.jaas.config"] = f"{_PLAIN_MODULE} required {users};"
            for mech in ("scram-sha-256", "scram-sha-512"):
                props[f"listener.name.{listener}.{mech}.sasl.jaas.config"] = f"{_SCRAM_MODULE} required;"
            props[f"listener.name.{listener}.sasl.enabled.mechanisms"] = ",".join(SASL_MECHANISMS)
            props[f"listener.name.{listener}.oauthbearer.sasl.jaas.config"] = (
                f'{_OAUTH_MODULE} required unsecuredLoginStringClaim_sub="broker";')
            if security.oauth_jwks_url:
                key = f"listener.name.{listener}.oauthbearer.sasl.server.callback.handler.class"
                props[key] = _JWT_VALIDATOR
        if protocol == "SSL":
            props["listener.name.ssl.ssl.client.auth"] = "required"
    if security.oauth_jwks_url:
        props["sasl.oauthbearer.jwks.endpoint.url"] = security.oauth_jwks_url
    if security.reauth_ms is not None:
        props["connections.max.reauth.ms"] = str(security.reauth_ms)
    if security.authorizer:
        props["authorizer.class.name"] = STANDARD_AUTHORIZER
        # ANONYMOUS: the PLAINTEXT/CONTROLLER listeners (inter-broker, controller, harness set-up)
        props["super.users"] = ";".join(["User:ANONYMOUS", *(f"User:{u}" for u in security.super_users)])
    if any(p.endswith("SSL") for p in security.listeners):
        props.update({
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tls.ca),
        })
    return props


def broker_jvm_args(security: BrokerSecurity) -> list[str]:
    """JVM options a node needs for ``security`` (the JWKS URL allowed, Kafka 4's rule)."""
    return [f"-D{ALLOWED_URLS_PROPERTY}={security.oauth_jwks_url}"] if security.oauth_jwks_url else []


def scram_format_args(security: BrokerSecurity) -> list[str]:
    """``--add-scram`` arguments of ``kafka-storage format`` for every SCRAM user and mechanism."""
    args: list[str] = []
    for user, password in security.scram_users.items():
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            args += ["--add-scram", f"{mech}=[name={user},password={password}]"]
    return args
