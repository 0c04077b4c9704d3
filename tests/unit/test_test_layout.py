"""The test tree itself: pytest imports test files by basename (rootdir-relative, no packages), so two
files with the same name in different folders stop the whole run at collection. Caught here, in the
unit run, before an integration run of many minutes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_has_its_own_basename() -> None:
    files = sorted(TESTS.rglob("test_*.py"))
    assert len(files) > 40, "the walk must see the test tree"
    counts = Counter(p.name for p in files)
    clashes = {name: [str(p.relative_to(TESTS)) for p in files if p.name == name]
               for name, n in counts.items() if n > 1}
    assert not clashes, f"test files sharing a basename (pytest cannot collect both): {clashes}"
