"""How many examples a property test runs, under the hypothesis profile ``tests/conftest.py`` loads."""

from __future__ import annotations


def examples(n: int) -> int:
    """A property test's example count: ``n`` under the ``ci`` hypothesis profile (the default,
    hypothesis's own 100 examples a test), ``n`` scaled like the profile's ``max_examples`` under
    another one (``HYPOTHESIS_PROFILE=dev``: a tenth)."""
    from hypothesis import settings

    return max(1, n * settings().max_examples // 100)
