# The Makefile is the interface: CI calls these same targets.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: run test lint bench fuzz clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/wikiq dev

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check api worker tests bench
	$(BIN)/ruff format --check api worker tests bench
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench

# A longer schemathesis run than the one inside `make test` (set WIKIQ_FUZZ_EXAMPLES to taste).
fuzz: $(STAMP)
	WIKIQ_FUZZ_EXAMPLES=$${WIKIQ_FUZZ_EXAMPLES:-300} $(BIN)/python -m pytest -q tests/e2e/test_fuzz.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
