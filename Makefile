# The two commands of README.md: `make demo` (main job) and `make test` (the whole suite).
PYTHON ?= python3

.PHONY: install install-tests demo test lint unit integration down bench wheel compose-check ui-screenshots

# what the demo needs (Java, Maven, a compiler, liblz4, mm2py, the Kafka jars)
install:
	./scripts/install.sh

# that, and what only the tests need (chromium and its driver, the dev and spark extras, the jars
# of the tiered-storage and Connect profiles)
install-tests:
	./scripts/install.sh --tests

# through mm2py.command: a Ctrl-C while the demo's modules load exits quietly too
demo: install
	$(PYTHON) -c 'import sys; from mm2py.command import demo; sys.exit(demo())'

# ruff, then pytest on five workers with mypy and the pure-Python unit pass beside it (scripts/test.sh)
test: install-tests
	PYTHON=$(PYTHON) ./scripts/test.sh

unit:
	$(PYTHON) -m pytest -q tests/unit

integration:
	$(PYTHON) -m pytest -q tests/integration

down:
	$(PYTHON) -m mm2py.cli dev down

bench:
	$(PYTHON) benchmarks/mirror_bench.py --quick

# a manylinux wheel in dist/ (compiled path included, liblz4 bundled): installs without a compiler
wheel: install
	./scripts/wheel.sh

# docker-compose.yml for real, both profiles (images built, records mirrored across a restart and a
# SIGKILL of the worker, exactly once); needs only a Docker engine, says "skipped" without one
compose-check:
	./scripts/compose-check.sh

# the operator page's screenshots in docs/ (README), taken by its browser test on live brokers
ui-screenshots:
	MM2PY_UI_SCREENSHOTS=docs $(PYTHON) -m pytest -q -p no:cacheprovider tests/integration/test_ui_browser.py
