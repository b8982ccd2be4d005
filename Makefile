# make demo       - install what is missing, then run the default scenario
# make test       - install what is missing, then run the whole test suite
# make test-fast  - the tests that need neither root nor a JVM (under a minute)
# make lint       - ruff, as configured in pyproject.toml
# make docs       - the documentation site into site/ (MkDocs, strict: a warning fails it)
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export JAVA_HOME ?= /usr/lib/jvm/java-17-openjdk-amd64

.PHONY: setup system demo test test-unit test-fast lint docs clean-sandbox

# the Spark class archive: a faster JVM start, not a requirement (README, "Spark")
setup: system $(VENV)/.installed
	@$(VENV)/bin/brokerchaos fetch >/dev/null
	@$(PY) -c 'import sys; from brokerchaos.sandbox import mounts; sys.exit(mounts.setup())' >/dev/null
	@$(VENV)/bin/python -m brokerchaos.analysis.cds || true

system:
	@./scripts/setup-system.sh

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test,bench]'
	touch $@

# exit 3 (a run failed) or 4 (a run could not decide) is a verdict, not a broken demo
demo: setup
	$(VENV)/bin/brokerchaos run scenarios/nats-kill-leader.yaml || test $$? -ge 3

# two workers (pytest-xdist), a test file to each in turn: a file's module-scoped cluster is
# started once; each session has its own namespaces, so the workers never meet
TEST_WORKERS ?= 2
# what the tests run beyond the defaults is fetched first, and no test downloads (tests/releases.txt)
test: setup
	@$(VENV)/bin/brokerchaos fetch --from tests/releases.txt >/dev/null
	BROKERCHAOS_NO_DOWNLOAD="make test fetched tests/releases.txt; a test's release belongs in it" \
	BROKERCHAOS_BROKER_JIT=quick \
	$(PY) -m pytest -q -p no:cacheprovider --durations=40 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test-unit: setup
	$(PY) -m pytest -q -p no:cacheprovider -m "not integration"

test-fast: setup
	$(PY) -m pytest -q -p no:cacheprovider -m "not integration and not root and not spark"

lint: setup
	$(VENV)/bin/ruff check .

# NO_MKDOCS_2_WARNING: Material's end-of-life banner (May 2027; docs/guide/install.md)
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site

clean-sandbox:
	$(VENV)/bin/brokerchaos clean
