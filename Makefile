# Two entry points (see README): `make demo` and `make test`. Both build .venv from nothing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

.PHONY: demo test lint bench
demo: $(STAMP)
	$(BIN)/python -m harness.demo

test: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/python -X dev -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

bench: $(STAMP)
	$(BIN)/python bench/run.py
