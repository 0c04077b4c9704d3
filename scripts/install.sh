#!/usr/bin/env bash
# Installs what mm2py needs on a fresh Debian/Ubuntu machine.
#
#   ./scripts/install.sh           what `make demo` needs: Java 17 + Maven, a C compiler and the
#                                  headers of Python and liblz4 for the compiled hot path (apt, only
#                                  if missing), mm2py itself (pip, editable, no extras; builds
#                                  mm2py.protocol._native) and the pinned Kafka jars (Maven)
#   ./scripts/install.sh --tests   all that, and what only `make test` needs: chromium and its driver
#                                  for the operator page's browser test (apt), the dev and spark
#                                  extras (pip), and the jars of the tiered-storage and Connect/
#                                  MirrorMaker 2 profiles (Maven)
set -euo pipefail
cd "$(dirname "$0")/.."

tests=0
case "${1:-}" in
  "") ;;
  --tests) tests=1 ;;
  *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
esac

SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
[ -f /usr/include/lz4frame.h ] || need_apt+=(liblz4-dev)
if [ "$tests" = 1 ]; then
  # the operator page's browser test (tests/integration/test_ui_browser.py): Debian's chromium and chromedriver
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
fi
PY="${PYTHON:-python3}"
"$PY" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")))' \
  || need_apt+=(python3-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing ${need_apt[*]} with apt-get"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

# the demo runs on the in-process runtime: neither pyspark (the spark extra) nor the dev extra
if [ "$tests" = 1 ]; then target='.[dev,spark]'; else target='.'; fi
"$PY" -m pip install --quiet --disable-pip-version-check -e "$target"
# byte-compile the package, as a non-editable install does: an environment with
# PYTHONDONTWRITEBYTECODE set would otherwise compile every module on every start (~0.3 s per
# mm2py process here); a module edited later is recompiled from its newer source as usual
PYTHONDONTWRITEBYTECODE= "$PY" -m compileall -q mm2py connectors rest_api
# the editable install builds the compiled path in place; say so loudly if it is not there
"$PY" -c 'from mm2py.protocol import native; assert native.AVAILABLE, "mm2py.protocol._native was not built"'
"$PY" -c 'from mm2py.kafka_local import resolve_jars; print("kafka jars:", resolve_jars())'
if [ "$tests" = 1 ]; then
  # brokers with KIP-405 remote storage (tests/integration/test_tiered_storage.py) also need the
  # LocalTieredStorage of kafka-storage's test artifact
  "$PY" -c 'from mm2py.kafka_local import resolve_jars; print("tiered:", resolve_jars(profile="tiered"))'
  # Kafka Connect's runtime and the Mirror connectors: the MirrorMaker 2 benchmarks' peer, and the
  # Connect worker of tests/integration/test_connect_differential.py
  "$PY" -c 'from mm2py.kafka_local import resolve_jars; print("connect:", resolve_jars(profile="mirrormaker"))'
fi
