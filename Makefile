# The two commands of README.md: `make demo` (main job) and `make test` (the whole suite).
PYTHON ?= python3

.PHONY: install demo test lint unit integration down bench wheel compose-check ui-screenshots

install:
	./scripts/install.sh

demo: install
	$(PYTHON) -m mm2py.demo

# ruff, then pytest on three workers with mypy and the pure-Python unit pass beside it (scripts/test.sh)
test: install
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
