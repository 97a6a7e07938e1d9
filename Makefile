# The Makefile is the interface: CI calls these same targets.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: run test lint bench fuzz clean deploy-test

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

# ARGS go to wikiq dev, e.g. make run ARGS="--port 9000 --data-dir /tmp/wikiq"
run: $(STAMP)
	$(BIN)/wikiq dev $(ARGS)

# The browser test needs Debian's chromium: installed here when we are root on Debian, else it is skipped.
test: $(STAMP)
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get install -y -q chromium >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1)) ; } || \
	  echo "make test: no chromium; the browser test will be skipped (apt-get install -y chromium)"
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check api worker tests bench tools examples
	$(BIN)/ruff format --check api worker tests bench tools examples
	$(BIN)/mypy
	$(BIN)/lint-imports

# The engine section compares with libgit2: pygit2 is the bench extra's.
$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	touch $@

bench: $(VENV)/.bench-installed
	$(BIN)/python -m bench

# A longer schemathesis run than the one inside `make test` (set WIKIQ_FUZZ_EXAMPLES to taste).
fuzz: $(STAMP)
	WIKIQ_FUZZ_EXAMPLES=$${WIKIQ_FUZZ_EXAMPLES:-300} $(BIN)/python -m pytest -q tests/e2e/test_fuzz.py

# The shipped container files started for real on podman (root; apt-get install -y podman podman-compose
# runc mmdebstrap): deploy/test/run, described in docs/deployment.md "The deployment test".
deploy-test: $(STAMP)
	$(BIN)/python deploy/test/run

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
