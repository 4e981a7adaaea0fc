# variant-autoscaler — `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PYTEST_ARGS ?=

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

.PHONY: install
install: $(VENV)/.installed ## Create ./.venv with the project and its dev tools.

.PHONY: test
test: install ## Run every test tier (unit, integration, e2e).
	$(BIN)/pytest tests $(PYTEST_ARGS)

.PHONY: unit
unit: install ## Run the unit tests only (no processes, no network).
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

.PHONY: lint
lint: install ## ruff, mypy --strict and the import-layering contracts.
	$(BIN)/ruff check operator emulator tests bench
	$(BIN)/ruff format --check operator emulator tests bench
	$(BIN)/mypy operator/variant_autoscaler emulator/vllm_emulator
	$(BIN)/lint-imports

.PHONY: fmt
fmt: install ## Format the code with ruff.
	$(BIN)/ruff format operator emulator tests bench
	$(BIN)/ruff check --fix operator emulator tests bench

.PHONY: bench
bench: install ## Run the benchmarks and rewrite docs/benchmarks.md.
	$(PY) bench/run_all.py --output docs/benchmarks.md

.PHONY: clean
clean: ## Remove the virtualenv and caches.
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
