#!/usr/bin/env bash
# The whole suite, as `make test` runs it (after ./scripts/install.sh --tests):
#   ruff, then pytest over tests/ on $WORKERS xdist workers, with mypy and the unit suite on the
#   pure-Python path (MM2PY_NATIVE=0) run beside it: most of the integration tests' time is spent
#   waiting on brokers and JVMs, so the two CPU-bound checks fill that time instead of adding theirs.
# Exit status 0 only when every part passed; the side parts' output is printed after pytest's.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
WORKERS="${MM2PY_TEST_WORKERS:-5}"

"$PY" -m ruff check . || exit 1

# pytest rewrites the asserts of each test module it imports and caches the result beside it, but
# writes no cache with PYTHONDONTWRITEBYTECODE set (as on this machine kind), and processes started
# together each rewrite everything anyway: each of this run's five pytest processes would spend ~7 CPU s
# on it, all at once. Two collections write the cache first (unit and integration side by side).
PYTHONDONTWRITEBYTECODE= "$PY" -m pytest --collect-only -q -p no:cacheprovider tests/unit >/dev/null 2>&1 &
PYTHONDONTWRITEBYTECODE= "$PY" -m pytest --collect-only -q -p no:cacheprovider tests/integration >/dev/null 2>&1
wait

side="$(mktemp -d)"
trap 'rm -rf "$side"' EXIT
# mypy's incremental cache outside the checkout, as Maven's is (it re-checks what changed)
MYPY_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/mm2py/mypy" PYTHON="$PY" ./scripts/typecheck.sh >"$side/mypy.log" 2>&1 &
mypy_pid=$!
# the unit tests whose code takes another path without the compiled extension (marked native_path:
# they call one of mm2py.protocol.native's stand-ins; the first pass fails a test that does so
# unmarked, tests/support/native_calls.py) again on the pure-Python path, not niced: its timing tests
# (a linger, a loop stall) need their share of the CPU (property tests at a third of their depth:
# the first pass compares both paths at full depth; the tests that start the CLI in a child process
# are the first pass's: they check its argument handling)
MM2PY_NATIVE=0 HYPOTHESIS_PROFILE=fallback "$PY" -m pytest -q -p no:cacheprovider --durations=10 \
  -m "native_path and not cli_process" tests/unit \
  >"$side/pure.log" 2>&1 &
pure_pid=$!

"$PY" -m pytest -q -p no:cacheprovider -n "$WORKERS" --dist loadfile --durations=15
main=$?

wait "$mypy_pid"; mypy=$?
wait "$pure_pid"; pure=$?
echo "---- mypy (exit $mypy)"; cat "$side/mypy.log"
echo "---- unit suite on the pure-Python path, MM2PY_NATIVE=0 (exit $pure)"; tail -n 40 "$side/pure.log"
[ "$main" = 0 ] && [ "$mypy" = 0 ] && [ "$pure" = 0 ]
