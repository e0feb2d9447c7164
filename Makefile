# The two commands of the README. Both work on a fresh machine with only python3 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck unit bench docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Stamp files: reinstall only when pyproject.toml changes.
$(VENV)/.core: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.all: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[all,dev,docs]"
	touch $@ $(VENV)/.core

demo: $(VENV)/.core
	$(BIN)/python -m saga_runtime.examples order

lint: $(VENV)/.all
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.all
	$(BIN)/mypy
	$(BIN)/mypy tests/typing

unit: $(VENV)/.all
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test: lint typecheck unit

# The documentation site, into site/; any warning fails the build.
docs: $(VENV)/.all
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(VENV)/.all
	$(BIN)/python -m benchmarks --quick

clean:
	rm -rf $(VENV) site .mypy_cache .ruff_cache .pytest_cache .hypothesis build dist *.egg-info
