"""HTTP Basic authentication as Kafka Connect's ``BasicAuthSecurityRestExtension`` does it, with its
files unchanged: the JAAS file's ``KafkaConnect`` section names
``org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule`` with
``file="<users file>"``, and the users file holds ``name: password`` lines (Java properties).

The users file is read again when it changes. A password is compared in constant time (both sides
hashed, then ``hmac.compare_digest``), an unknown user as long as a known one; no password is ever
logged, returned or kept beyond the users file's contents.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mm2py.config.errors import ConfigError
from mm2py.config.properties import decode_properties_bytes, parse_properties

__all__ = ["JAAS_SECTION", "PROPERTY_FILE_MODULE", "BasicAuth", "LoginModule", "parse_basic", "read_jaas"]

#: the JAAS section Connect's extension logs in with
JAAS_SECTION = "KafkaConnect"
PROPERTY_FILE_MODULE = "org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<punct>[{};=])|(?P<word>[^\s{};="]+))',
                    re.DOTALL)
_COMMENTS = re.compile(r'//[^\n]*|/\*.*?\*/|("(?:[^"\\]|\\.)*")', re.DOTALL)


@dataclass(frozen=True)
class LoginModule:
    """One login module of a JAAS section: its class, flag and options."""

    name: str
    flag: str
    options: dict[str, str]


def _tokens(text: str) -> list[tuple[str, str]]:
    text = _COMMENTS.sub(lambda m: m.group(1) or " ", text)
    out, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            if text[pos:].strip():
                raise ValueError(f"unexpected {text[pos:pos + 20]!r}")
            break
        pos = match.end()
        if match["quoted"] is not None:
            out.append(("str", re.sub(r"\\(.)", r"\1", match["quoted"])))
        elif match["punct"] is not None:
            out.append(("punct", match["punct"]))
        elif match["word"] is not None:
            out.append(("word", match["word"]))
    return out


def parse_jaas(text: str) -> dict[str, list[LoginModule]]:
    """A JAAS configuration file's sections: ``Name { Class flag key="value" ...; ... };``."""
    tokens, i, sections = _tokens(text), 0, {}

    def take(kind: str | None = None, value: str | None = None) -> str:
        nonlocal i
        if i >= len(tokens):
            raise ValueError("unexpected end of file")
        got_kind, got = tokens[i]
        if (kind is not None and got_kind != kind) or (value is not None and got != value):
            raise ValueError(f"expected {value or kind}, found {got!r}")
        i += 1
        return got

    while i < len(tokens):
        name = take("word")
        take("punct", "{")
        modules = []
        while i < len(tokens) and tokens[i] != ("punct", "}"):
            module, flag = take("word"), take("word").lower()
            if flag not in _FLAGS:
                raise ValueError(f"{module}: the flag must be one of {', '.join(_FLAGS)}, not {flag!r}")
            options = {}
            while i < len(tokens) and tokens[i] != ("punct", ";"):
                key = take("word")
                take("punct", "=")
                options[key] = take()
            take("punct", ";")
            modules.append(LoginModule(module, flag, options))
        take("punct", "}")
        take("punct", ";")
        sections[name] = modules
    return sections


def read_jaas(path: str) -> list[LoginModule]:
    """The ``KafkaConnect`` section's login modules from the JAAS file at ``path``: each a
    ``PropertyFileLoginModule`` with its ``file``."""
    where = f"the JAAS file {path!r}"
    try:
        text = decode_properties_bytes(Path(path).read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read {where}: {exc.strerror}", "rest.extension.classes") from None
    try:
        sections = parse_jaas(text)
    except ValueError as exc:
        raise ConfigError(f"{where} is not a JAAS configuration: {exc}", "rest.extension.classes") from None
    modules = sections.get(JAAS_SECTION)
    if not modules:
        raise ConfigError(f"{where} has no {JAAS_SECTION} section (found: {', '.join(sections) or 'none'})",
                          "rest.extension.classes")
    for module in modules:
        if module.name != PROPERTY_FILE_MODULE:
            raise ConfigError(f"{where}: mm2py logs in with {PROPERTY_FILE_MODULE} only, not {module.name}",
                              "rest.extension.classes")
        if not module.options.get("file"):
            raise ConfigError(f"{where}: {PROPERTY_FILE_MODULE} needs file=\"<users file>\"",
                              "rest.extension.classes")
    return modules


def parse_basic(header: str) -> tuple[str, str] | None:
    """``Basic <base64 of user:password>`` as (user, password); None when malformed."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic" or not encoded.strip():
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class _UsersFile:
    """A users file (``name: password`` lines), read again when it changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[Any, ...] | None = None
        self._users: dict[str, bytes] = {}
        self._load()

    def _load(self) -> None:
        try:
            st = os.stat(self.path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            text = decode_properties_bytes(Path(self.path).read_bytes())
        except OSError as exc:
            if self._stamp is None:
                raise ConfigError(f"cannot read the users file {self.path!r}: {exc.strerror}",
                                  "rest.extension.classes") from None
            return  # replaced while being read: the previous users stand until it is back
        users = {name: _digest(password) for name, password in parse_properties(text).items()}
        with self._lock:
            self._users, self._stamp = users, stamp

    def check(self, user: str, password: str) -> bool:
        self._load()
        stored = self._users.get(user)
        expected = stored if stored is not None else _digest("\0unknown user\0")
        return hmac.compare_digest(expected, _digest(password)) and stored is not None


class BasicAuth:
    """Connect's Basic authentication over the JAAS file at ``jaas_file``."""

    realm = JAAS_SECTION

    def __init__(self, jaas_file: str) -> None:
        self.modules = [(module.flag, _UsersFile(module.options["file"])) for module in read_jaas(jaas_file)]

    def check(self, user: str, password: str) -> bool:
        """Whether ``user`` logs in with ``password``, by JAAS's rules for the modules' flags."""
        required_failed, sufficient_passed = False, False
        for flag, users in self.modules:
            passed = users.check(user, password)
            if flag in ("required", "requisite"):
                if not passed:
                    if flag == "requisite":
                        return False
                    required_failed = True
            elif passed and flag == "sufficient" and not required_failed:
                return True
            elif passed:
                sufficient_passed = True
        if required_failed:
            return False
        return any(flag in ("required", "requisite") for flag, _ in self.modules) or sufficient_passed
