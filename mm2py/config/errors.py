"""Configuration errors: :class:`ConfigError` (from the project's error tree) and did-you-mean hints."""

from __future__ import annotations

from collections.abc import Iterable

from mm2py.errors import ConfigError

__all__ = ["ConfigError", "did_you_mean"]


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or an empty string."""
    import difflib  # only for a bad key's hint

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""
