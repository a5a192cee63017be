# Mnemostream entry points. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.9
LOCK := requirements/lock.txt
STAMP := $(VENV)/.installed

.PHONY: help install lock up down test lint format typecheck imports unit

help: ## List every target with its one-line help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): $(LOCK) pyproject.toml
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet "uv==$(UV_VERSION)"
	@test -x $(BIN)/python || uv venv --quiet --python $(PYTHON) $(VENV)
	uv pip install --quiet --python $(BIN)/python -r $(LOCK)
	uv pip install --quiet --python $(BIN)/python --no-deps -e .
	@touch $@

install: $(STAMP) ## Create .venv and install the locked dependencies (torch, faust, milvus, ...)

lock: ## Re-resolve requirements/lock.txt from pyproject.toml
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet "uv==$(UV_VERSION)"
	uv pip compile pyproject.toml --extra dev --python-version 3.11 --quiet -o $(LOCK)

up: install ## Run the service (Kafka, worker, ranker, embedded Milvus); see README for what runs today
	@echo "Environment ready in $(VENV). The Kafka broker, worker and ranker arrive with issues #3 and #4."

down: ## Stop what `make up` started (by pid)
	@echo "Nothing is started by 'make up' yet."

lint: install ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install ## Apply ruff formatting and safe fixes
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: install ## mypy --strict on every package
	$(BIN)/mypy

imports: install ## The import contract (dependency direction)
	$(BIN)/lint-imports

unit: install ## Unit and property tests with memcore coverage
	$(BIN)/pytest --cov --cov-report=term-missing:skip-covered tests/unit

test: lint typecheck imports unit ## Everything CI runs: lint, types, import contract, tests
