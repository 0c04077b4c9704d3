#!/usr/bin/env bash
# `make test` after the install: lint and types, the whole pytest suite on two workers, and the unit
# suite once more on the pure-Python path (MM2PY_NATIVE=0: a user without the compiled extension).
# The second pass runs beside the first at a low priority, on the CPU the first leaves idle while
# its tests wait on brokers and JVMs; its output follows the first's.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

"$PYTHON" -m ruff check . || exit 1
"$PYTHON" -m mypy || exit 1

mkdir -p test-logs
pure_log=test-logs/pure-python-unit.log
MM2PY_NATIVE=0 nice -n 10 "$PYTHON" -m pytest -q -p no:cacheprovider tests/unit >"$pure_log" 2>&1 &
pure=$!
trap 'kill "$pure" 2>/dev/null' EXIT

"$PYTHON" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=15
main=$?

wait "$pure"
second=$?
trap - EXIT
echo
echo "== the unit suite on the pure-Python path (MM2PY_NATIVE=0) =="
cat "$pure_log"
rm -f "$pure_log"
[ "$main" -eq 0 ] && [ "$second" -eq 0 ]
