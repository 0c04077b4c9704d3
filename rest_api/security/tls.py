"""HTTPS for the REST API from Kafka Connect's ``ssl.*`` settings: the server's ``ssl.SSLContext``
(TLS 1.2 and up; ``ssl.client.auth`` none, requested or required), its keystore and truststore read
as PEM (a file holding the key and its certificate chain, or ``ssl.keystore.key`` and
``ssl.keystore.certificate.chain`` inline) or PKCS12 (with the ``cryptography`` library). A JKS store
is refused with the ``keytool`` command that converts it.

:class:`ServerTls` reads the keystore and truststore again when their files change: every TLS
handshake looks at the files' stamps (one ``stat`` each), and a changed file is loaded into a fresh
context that the handshake, and every later one, uses. A file caught half written is tried again at
the next handshake; the old certificate is served until then.

:func:`with_client_subject` passes the client certificate's subject (RFC 4514) to the app as the
ASGI TLS extension's ``client_cert_name``.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import ssl
import tempfile
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from mm2py.config.errors import ConfigError
from mm2py.rest_api.security.settings import TlsSettings

__all__ = ["ServerTls", "client_subject", "server_context", "with_client_subject"]

log = logging.getLogger("mm2py.rest.tls")

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS
_PEM_KEY = re.compile(rb"-----BEGIN ([A-Z ]*)PRIVATE KEY-----.+?-----END \1PRIVATE KEY-----", re.DOTALL)
_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server context from ``settings``; a ``ConfigError`` naming the key when one is wrong."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = []
    for name in (v.strip() for v in settings.enabled_protocols.split(",") if v.strip()):
        if name not in _VERSIONS:
            key = settings.key("ssl.enabled.protocols")
            raise ConfigError(f"{key}: {name!r} is not served; the REST API speaks TLSv1.2 and TLSv1.3", key)
        versions.append(_VERSIONS[name])
    if not versions:
        raise ConfigError("no TLS version enabled", settings.key("ssl.enabled.protocols"))
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    if settings.cipher_suites:
        log.warning("%s is not applied: Java's cipher suite names are not OpenSSL's; the REST API uses "
                    "OpenSSL's defaults for TLS 1.2 and 1.3", settings.key("ssl.cipher.suites"))
    key, chain = _keystore(settings)
    _load_chain(ctx, key, chain, settings)
    ctx.verify_mode = _VERIFY[settings.client_auth]
    cas = _truststore(settings)
    if cas:
        ctx.load_verify_locations(cadata=b"".join(_pem_cert(c) for c in cas).decode("ascii"))
    elif settings.client_auth != "none":
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # Java's default trust store, likewise
    return ctx


class ServerTls:
    """An HTTPS listener's context (``.context``), its keystore and truststore files watched."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self._stamp = self._files()
        self.context = server_context(settings)
        self.context.sni_callback = self._on_hello
        self._current = self.context
        self._failed_stamp: tuple[Any, ...] | None = None
        #: times the certificate was read again (for tests and logs)
        self.reloads = 0

    def _files(self) -> tuple[Any, ...]:
        stamps: list[Any] = []
        for location in (self.settings.keystore_location, self.settings.truststore_location):
            if location:
                try:
                    st = os.stat(location)
                    stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
                except OSError:
                    stamps.append(None)
        return tuple(stamps)

    def _on_hello(self, ssl_object: Any, _server_name: str | None, _context: ssl.SSLContext) -> None:
        stamp = self._files()
        if stamp != self._stamp:
            try:
                fresh = server_context(self.settings)
            except (ConfigError, ssl.SSLError, OSError, ValueError) as exc:
                if stamp != self._failed_stamp:  # once per change of the files
                    self._failed_stamp = stamp
                    log.warning("the REST API's certificate files changed but cannot be read (%s); "
                                "still serving the previous certificate", exc)
            else:
                self._current, self._stamp = fresh, stamp
                self.reloads += 1
                log.info("the REST API's certificate was read again from %s", self.settings.keystore_location)
        if self._current is not self.context:
            ssl_object.context = self._current


def _read(settings: TlsSettings, name: str, location: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{settings.key(name)}: cannot read {location!r}: {exc.strerror}",
                          settings.key(name)) from None


def _store_kind(settings: TlsSettings, store: str, data: bytes, declared: str | None) -> str:
    """PEM or PKCS12; JKS (Kafka's default type) refused with the command that converts it."""
    kind = (declared or "JKS").upper()
    location = getattr(settings, f"{store}_location")
    name = settings.key(f"ssl.{store}.location")
    if data[:4] in _JKS_MAGIC:
        target = str(Path(location).with_suffix(".p12"))
        raise ConfigError(
            f"{name}: {location!r} is a Java KeyStore (JKS), which mm2py cannot read; convert it to PKCS12 "
            f"with: keytool -importkeystore -srckeystore {location} -srcstoretype JKS -destkeystore {target} "
            f"-deststoretype PKCS12, then set {name}={target} and {settings.key(f'ssl.{store}.type')}=PKCS12",
            settings.key(f"ssl.{store}.type"))
    if data.lstrip().startswith(b"-----BEGIN"):
        return "PEM"
    if kind == "PEM":
        raise ConfigError(f"{name}: {location!r} is not PEM text", name)
    if kind in ("PKCS12", "JKS", "JCEKS"):  # Java reads a PKCS12 file under the JKS type too
        return "PKCS12"
    raise ConfigError(f"{settings.key(f'ssl.{store}.type')}: {declared!r}: the REST API reads PEM and PKCS12",
                      settings.key(f"ssl.{store}.type"))


def _secret(value: Any) -> bytes | None:
    return None if value is None else str(value.get_secret_value()).encode()


def _keystore(settings: TlsSettings) -> tuple[Any, list[Any]]:
    """The private key and its certificate chain (leaf first)."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    if settings.keystore_key is not None:
        if not settings.keystore_certificate_chain:
            key = settings.key("ssl.keystore.certificate.chain")
            raise ConfigError(f"{settings.key('ssl.keystore.key')} is set: set {key} too (PEM)", key)
        pem = settings.keystore_key.get_secret_value().encode()
        return _pem_key(settings, pem), _pem_certs(settings, "ssl.keystore.certificate.chain",
                                                   settings.keystore_certificate_chain.encode())
    if not settings.keystore_location:
        key = settings.key("ssl.keystore.location")
        inline = f"{settings.key('ssl.keystore.key')} and {settings.key('ssl.keystore.certificate.chain')}"
        raise ConfigError(f"an https listener needs a keystore: set {key} (PEM or PKCS12), or {inline}", key)
    data = _read(settings, "ssl.keystore.location", settings.keystore_location)
    if _store_kind(settings, "keystore", data, settings.keystore_type) == "PEM":
        return _pem_key(settings, data), _pem_certs(settings, "ssl.keystore.location", data)
    for password in dict.fromkeys((_secret(settings.keystore_password), _secret(settings.key_password))):
        try:
            loaded = pkcs12.load_key_and_certificates(data, password)
        except ValueError:
            continue
        if loaded[0] is None or loaded[1] is None:
            raise ConfigError(f"{settings.key('ssl.keystore.location')}: the PKCS12 store holds no "
                              "private key with its certificate", settings.key("ssl.keystore.location"))
        return loaded[0], [loaded[1], *loaded[2]]
    raise ConfigError(f"{settings.key('ssl.keystore.location')}: cannot open the PKCS12 store (wrong "
                      f"{settings.key('ssl.keystore.password')}?)", settings.key("ssl.keystore.password"))


def _pem_key(settings: TlsSettings, data: bytes) -> Any:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    match = _PEM_KEY.search(data)
    where = settings.key("ssl.keystore.key" if settings.keystore_key is not None else "ssl.keystore.location")
    if match is None:
        raise ConfigError(f"{where}: no PEM private key found", where)
    try:
        return load_pem_private_key(match.group(0), _secret(settings.key_password))
    except (ValueError, TypeError):
        key = settings.key("ssl.key.password")
        raise ConfigError(f"{where}: cannot read the private key (encrypted? then {key} must be its "
                          "password)", key) from None


def _pem_certs(settings: TlsSettings, name: str, data: bytes) -> list[Any]:
    from cryptography import x509

    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise ConfigError(f"{settings.key(name)}: no PEM certificate found", settings.key(name))
    return certs


def _pem_cert(cert: Any) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    return bytes(cert.public_bytes(Encoding.PEM))


def _load_chain(ctx: ssl.SSLContext, key: Any, chain: list[Any], settings: TlsSettings) -> None:
    """``key`` and ``chain`` into ``ctx``. Python loads them only from files: they are written to a
    private directory, the key encrypted with a one-time password held in memory, and removed."""
    from cryptography.hazmat.primitives import serialization

    once = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="mm2py-rest-tls-") as directory:
        key_file, chain_file = Path(directory, "key.pem"), Path(directory, "chain.pem")
        key_file.write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(once.encode())))
        chain_file.write_bytes(b"".join(_pem_cert(c) for c in chain))
        try:
            ctx.load_cert_chain(chain_file, key_file, password=once)
        except ssl.SSLError as exc:
            key_name = settings.key("ssl.keystore.location")
            raise ConfigError(f"{key_name}: the private key and certificate do not load together "
                              f"({exc.reason or exc})", key_name) from None


def _truststore(settings: TlsSettings) -> list[Any]:
    """The trusted certificates (none when no truststore is set)."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    if settings.truststore_certificates:
        return _pem_certs(settings, "ssl.truststore.certificates", settings.truststore_certificates.encode())
    if not settings.truststore_location:
        return []
    data = _read(settings, "ssl.truststore.location", settings.truststore_location)
    if _store_kind(settings, "truststore", data, settings.truststore_type) == "PEM":
        return _pem_certs(settings, "ssl.truststore.location", data)
    try:
        store = pkcs12.load_pkcs12(data, _secret(settings.truststore_password))
    except ValueError:
        key = settings.key("ssl.truststore.password")
        raise ConfigError(f"{settings.key('ssl.truststore.location')}: cannot open the PKCS12 store (wrong "
                          f"{key}?)", key) from None
    certs = [c.certificate for c in store.additional_certs]
    return ([store.cert.certificate] if store.cert is not None else []) + certs


def client_subject(ssl_object: Any) -> str | None:
    """The verified client certificate's subject as RFC 4514 text (``CN=alice,O=example``), or None."""
    from cryptography import x509

    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return None
    return str(x509.load_der_x509_certificate(der).subject.rfc4514_string())


Scope = MutableMapping[str, Any]
Asgi = Callable[[Scope, Any, Any], Awaitable[None]]


def with_client_subject(protocol_class: Any) -> Any:
    """``protocol_class`` (uvicorn's HTTP protocol) passing each connection's client certificate
    subject to the app as ``scope["extensions"]["tls"]["client_cert_name"]``."""

    class ClientSubjectProtocol(protocol_class):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            subject = client_subject(transport.get_extra_info("ssl_object"))
            if subject is None:
                return
            app: Asgi = getattr(self, "app")  # noqa: B009  (uvicorn's protocol sets it)

            async def with_subject(scope: Scope, receive: Any, send: Any) -> None:
                extensions = scope.get("extensions") or {}
                scope["extensions"] = {**extensions, "tls": {"client_cert_name": subject}}
                await app(scope, receive, send)

            self.app = with_subject

    return ClientSubjectProtocol
