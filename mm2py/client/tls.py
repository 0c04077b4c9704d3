"""``ssl.SSLContext`` for broker connections: trusted CAs, optional client certificate (mTLS).

The broker's certificate chain is always verified. Host name verification is on by default (Java's
``ssl.endpoint.identification.algorithm=https``) and can be turned off (the algorithm set to empty),
which still verifies the chain. Python's ``ssl`` reads certificates and keys in PEM only;
certificates and keys given inline (PEM text) are written to a private temporary file for the
moment ``load_cert_chain`` reads them.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from mm2py.errors import ConfigError


class TlsConfigError(ConfigError):
    """Certificates or keys that cannot be loaded. ``part`` says which: ``"ca"`` or ``"client"``."""

    def __init__(self, message: str, part: str) -> None:
        super().__init__(message)
        self.part = part

    def __reduce__(self) -> tuple[type[TlsConfigError], tuple[str, str]]:
        return (type(self), (str(self), self.part))


@dataclass(frozen=True)
class TlsSettings:
    """Where the trusted CAs and the client certificate come from (files or inline PEM)."""

    ca_file: str | None = None
    ca_pem: str | None = None
    cert_file: str | None = None  # certificate chain; may hold the private key too
    cert_pem: str | None = None
    key_file: str | None = None
    key_pem: str | None = field(default=None, repr=False)  # a private key: never shown
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True


@contextlib.contextmanager
def _pem_file(text: str) -> Iterator[str]:
    fd, path = tempfile.mkstemp(prefix="mm2py-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _no_password() -> str:
    # without a callback OpenSSL would prompt on the terminal for the password of an encrypted key
    raise TlsConfigError("the client key is encrypted and no key password is set", "client")


def ssl_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client context that verifies the broker with ``settings``' CAs (system CAs when none)."""
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.ca_file,
                                         cadata=settings.ca_pem)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise TlsConfigError(f"cannot load the trusted CA certificates: {e}", "ca") from e
    ctx.check_hostname = settings.check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    has_cert = settings.cert_file is not None or settings.cert_pem is not None
    has_key = settings.key_file is not None or settings.key_pem is not None
    if has_key and not has_cert:
        raise TlsConfigError("a client key needs a client certificate", "client")
    if has_cert:
        try:
            with contextlib.ExitStack() as stack:
                cert = settings.cert_file or stack.enter_context(_pem_file(settings.cert_pem or ""))
                key = settings.key_file
                if key is None and settings.key_pem is not None:
                    key = stack.enter_context(_pem_file(settings.key_pem))
                ctx.load_cert_chain(cert, key, settings.key_password or _no_password)
        except TlsConfigError:
            raise
        except (ssl.SSLError, OSError, ValueError) as e:
            raise TlsConfigError(f"cannot load the client certificate and key: {e}", "client") from e
    return ctx
