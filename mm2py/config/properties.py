"""A reader for Java ``.properties`` text (the ``mm2.properties`` format), as java.util.Properties.

Rules implemented (from the ``Properties.load`` contract):

* a logical line may span several natural lines: a line ending in an odd number of backslashes
  continues on the next one, whose leading whitespace is dropped;
* blank lines and comment lines (first non-blank character ``#`` or ``!``) are skipped; a comment
  line is never continued;
* the key ends at the first unescaped ``=``, ``:`` or whitespace; whitespace, then at most one
  ``=``/``:``, then whitespace separate it from the value;
* escapes: ``\\t \\n \\r \\f``, ``\\uXXXX``, and a backslash before any other character yields that
  character; a malformed ``\\u`` escape is an error;
* a later duplicate key replaces an earlier one.

Unlike Java (ISO-8859-1 for byte streams) files are decoded as UTF-8, falling back to ISO-8859-1
when the bytes are not valid UTF-8.
"""

from __future__ import annotations

from mm2py.config.errors import ConfigError

__all__ = ["decode_properties_bytes", "parse_properties"]

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def decode_properties_bytes(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("iso-8859-1")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(1-based first line number, logical line with continuations joined; escapes kept)."""
    natural = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(natural):
        start = i
        line = natural[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _ends_with_odd_backslashes(line) and i <= len(natural):
            line = line[:-1]
            if i == len(natural):  # continuation at end of input: nothing follows
                break
            line += natural[i].lstrip(_WHITESPACE)
            i += 1
        out.append((start + 1, line))
    return out


def _ends_with_odd_backslashes(line: str) -> bool:
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def _unescape(raw: str, line_no: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(raw):  # a lone trailing backslash (continuation at end of input)
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt == "u":
            digits = raw[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(f"line {line_no}: malformed \\uXXXX escape {raw[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch in _WHITESPACE:
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``.properties`` text into an ordered ``{key: value}`` dict (later keys win)."""
    result: dict[str, str] = {}
    for line_no, line in _logical_lines(text):
        raw_key, raw_value = _split_key_value(line)
        key = _unescape(raw_key, line_no)
        value = _unescape(raw_value, line_no)
        result.pop(key, None)  # keep the position of the last occurrence
        result[key] = value
    return result
