#!/usr/bin/env bash
# mypy over the whole product. mypy knows no setuptools package_dir, so it reads the package through
# a tree of links laid as an install lays it (build/typecheck/mm2py: mm2py/'s entries, and
# connectors/ and rest_api/ from the top of the checkout); its reports name the checkout's files.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
tree=build/typecheck
rm -rf "$tree"
mkdir -p "$tree/mm2py"
for entry in mm2py/* connectors rest_api; do
  case "$entry" in *__pycache__) continue ;; esac
  ln -s "$PWD/$entry" "$tree/mm2py/$(basename "$entry")"
done
MYPYPATH="$tree" exec "$PY" -m mypy "$@"
