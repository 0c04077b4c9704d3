"""A development certificate and users for the REST API, so a new setup is HTTPS and authenticated
from its first start (the compose setup runs this once, in a container, before the worker).

``python -m mm2py.rest_api.security.dev_cert --dir /certs [--host mm2py ...]`` writes, unless they
are there already (a restart keeps them, and a file put there beforehand is never replaced):

- ``ca.pem``: a self-signed CA (ten years) a client trusts (``curl --cacert ca.pem``);
- ``rest.pem``: the REST API's key and certificate chain in one PEM file (Kafka Connect's
  ``listeners.https.ssl.keystore.type=PEM`` with ``...keystore.location``), for ``localhost``,
  ``127.0.0.1`` and each ``--host``, valid for a year;
- ``rest-users.properties``: Kafka Connect's users file, ``admin`` and ``viewer`` (read-only with
  ``mm2py.rest.read.only.users = viewer``), each with a random password;
- ``rest-jaas.conf``: Kafka Connect's JAAS file naming that users file.

``--probe URL`` asks ``URL`` as ``viewer`` over that CA and exits 0 on a 2xx answer (a container's
health check). Replace the files with your own (same names, or other paths in the worker's
``listeners.https.ssl.*`` keys and JAAS file); nothing here is meant for production.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import os
import secrets
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mm2py.config.properties import parse_properties
from mm2py.rest_api.security.basic import JAAS_SECTION, PROPERTY_FILE_MODULE

__all__ = ["main", "write_dev_files"]

FILES = ("ca.pem", "rest.pem", "rest-users.properties", "rest-jaas.conf")


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """``data`` at ``path`` whole or not at all (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def write_dev_files(directory: Path, hosts: list[str]) -> list[str]:
    """The files of the module docstring in ``directory``, those missing; returns those written."""
    directory.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    now = datetime.datetime.now(datetime.UTC)
    start = now - datetime.timedelta(minutes=5)  # a clock a little behind still takes them
    if not (directory / "ca.pem").exists() or not (directory / "rest.pem").exists():
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = (x509.CertificateBuilder().subject_name(_name("mm2py development CA"))
              .issuer_name(_name("mm2py development CA")).public_key(ca_key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(start)
              .not_valid_after(now + datetime.timedelta(days=3650))
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .sign(ca_key, hashes.SHA256()))
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in dict.fromkeys(["localhost", "127.0.0.1", *hosts]):
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        leaf = (x509.CertificateBuilder().subject_name(_name(hosts[0] if hosts else "localhost"))
                .issuer_name(ca.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(start)
                .not_valid_after(now + datetime.timedelta(days=365))
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        _write(directory / "rest.pem", _key_pem(key) + _pem(leaf) + _pem(ca), 0o600)
        _write(directory / "ca.pem", _pem(ca))
        written += ["ca.pem", "rest.pem"]
    users = directory / "rest-users.properties"
    if not users.exists():
        lines = [f"{user}: {secrets.token_urlsafe(18)}" for user in ("admin", "viewer")]
        _write(users, ("# Kafka Connect's users file (name: password), written by dev_cert\n"
                       + "\n".join(lines) + "\n").encode(), 0o600)
        written.append("rest-users.properties")
    jaas = directory / "rest-jaas.conf"
    if not jaas.exists():
        _write(jaas, (f'{JAAS_SECTION} {{\n  {PROPERTY_FILE_MODULE} required\n'
                      f'  file="{users.resolve()}";\n}};\n').encode())
        written.append("rest-jaas.conf")
    return written


def probe(url: str, directory: Path, user: str = "viewer") -> int:
    """Ask ``url`` as ``user`` over the CA in ``directory``: the HTTP status (0: no answer)."""
    users = parse_properties((directory / "rest-users.properties").read_text())
    token = base64.b64encode(f"{user}:{users[user]}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    context = ssl.create_default_context(cafile=str(directory / "ca.pem"))
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mm2py.rest_api.security.dev_cert", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True, help="where the files are (written when missing)")
    ap.add_argument("--host", action="append", default=[], help="a name the certificate is for (repeat)")
    ap.add_argument("--probe", metavar="URL", help="ask URL as viewer instead; exit 0 on a 2xx answer")
    args = ap.parse_args(argv)
    if args.probe:
        status = probe(args.probe, args.dir)
        return 0 if 200 <= status < 300 else 1
    written = write_dev_files(args.dir, args.host)
    kept = [f for f in FILES if f not in written]
    print(f"dev_cert: {args.dir}: wrote {', '.join(written) or 'nothing'}"
          + (f"; kept {', '.join(kept)}" if kept else "")
          + f" (passwords in {args.dir / 'rest-users.properties'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
