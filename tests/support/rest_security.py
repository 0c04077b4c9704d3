"""What the tests of the secured REST API share: throwaway certificates (a CA, a server certificate
for 127.0.0.1 that can be replaced in place, client certificates) and Kafka Connect's own Basic
authentication files (its JAAS file and a users file), written as Connect's documentation writes
them."""

from __future__ import annotations

import datetime
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mm2py.kafka_local.security import _ca, _leaf, _pem, _pkcs8

__all__ = ["JAAS", "Pki", "client_context", "connect_basic_auth_files"]

#: Connect's JAAS file for its BasicAuthSecurityRestExtension
JAAS = """KafkaConnect {
  org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule required
  file="%s";
};
"""


def connect_basic_auth_files(directory: Path, users: Mapping[str, str]) -> Path:
    """Connect's users file (``name: password`` lines) and the JAAS file naming it; the JAAS file."""
    users_file = directory / "rest-users.properties"
    users_file.write_text("".join(f"{name}: {password}\n" for name, password in users.items()))
    jaas = directory / "rest-jaas.conf"
    jaas.write_text(JAAS % users_file)
    return jaas


@dataclass
class Pki:
    """A CA, a server certificate for 127.0.0.1 (``server``: key and chain, PEM), client
    certificates on demand, and a CA that signed nothing (``other_ca``)."""

    dir: Path

    def __post_init__(self) -> None:
        now = datetime.datetime.now(datetime.UTC)
        self.ca_key, self.ca_cert = _ca("rest test CA", now)
        self.ca = self.dir / "ca.pem"
        self.ca.write_bytes(_pem(self.ca_cert))
        self.other_ca = self.dir / "other-ca.pem"
        self.other_ca.write_bytes(_pem(_ca("unrelated CA", now)[1]))
        self.server = self.dir / "server.pem"
        self.write_server_cert(self.server, "rest-server-1")

    def write_server_cert(self, path: Path, cn: str) -> None:
        """A new server certificate at ``path``, replaced at once as a certificate manager does."""
        key, cert = _leaf(cn, self.ca_key, self.ca_cert, datetime.datetime.now(datetime.UTC), server=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(_pkcs8(key) + _pem(cert))
        os.replace(tmp, path)

    def client(self, cn: str, ca_key: Any = None, ca_cert: Any = None) -> tuple[Path, Path]:
        """A client certificate ``CN=<cn>`` (signed by this CA unless another is given): its files."""
        now = datetime.datetime.now(datetime.UTC)
        key, cert = _leaf(cn, ca_key or self.ca_key, ca_cert or self.ca_cert, now, server=False)
        cert_file, key_file = self.dir / f"{cn}.pem", self.dir / f"{cn}.key"
        cert_file.write_bytes(_pem(cert))
        key_file.write_bytes(_pkcs8(key))
        return cert_file, key_file

    def https_keys(self, **more: str) -> dict[str, str]:
        """A worker configuration's keys for one HTTPS listener on a free loopback port."""
        return {"listeners": "https://127.0.0.1:0", "listeners.https.ssl.keystore.type": "PEM",
                "listeners.https.ssl.keystore.location": str(self.server), **more}


def client_context(ca: Path, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    """A client's TLS context trusting ``ca``, presenting ``cert`` (files) when given."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx
