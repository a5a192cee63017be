# Mnemostream entry points. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.9
LOCK := requirements/lock.txt
STAMP := $(VENV)/.installed
# uv from PATH, else from the Python it is installed into (a distribution's Python refuses a plain
# `pip install` (PEP 668): it then goes to the user's site-packages, run as `python -m uv`)
UV := $(shell command -v uv 2>/dev/null || echo "$(PYTHON) -m uv")
UV_BOOTSTRAP := $(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet "uv==$(UV_VERSION)" \
	|| $(PYTHON) -m pip install --quiet --user --break-system-packages "uv==$(UV_VERSION)"

.PHONY: help install lock up down kafka test lint format typecheck imports unit integration bench bench-gpu

help: ## List every target with its one-line help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): $(LOCK) pyproject.toml sdk/pyproject.toml
	@$(UV_BOOTSTRAP)
	@test -x $(BIN)/python || $(UV) venv --quiet --python $(PYTHON) $(VENV)
	$(UV) pip install --quiet --python $(BIN)/python -r $(LOCK)
	$(UV) pip install --quiet --python $(BIN)/python --no-deps -e . -e sdk
	@touch $@

install: $(STAMP) ## Create .venv and install the locked dependencies (torch, faust, milvus, ...)

lock: ## Re-resolve requirements/lock.txt (and gpu.txt, the GPU image's FAISS) from pyproject.toml
	@$(UV_BOOTSTRAP)
	$(UV) pip compile pyproject.toml --extra dev --python-version 3.11 --quiet -o $(LOCK)
	$(UV) pip compile requirements/gpu.in -c $(LOCK) --python-version 3.11 --quiet -o requirements/gpu.txt

up: install ## Run the service: Kafka, the stream worker and the ranker (HTTP :8080) on embedded Milvus Lite; STACK_EDGES=N: N more HTTP processes
	scripts/stack.sh up

down: ## Stop what `make up` started (by pid)
	scripts/stack.sh down

kafka: ## Fetch the pinned Kafka jars (Maven Central) and start only the broker
	scripts/kafka.sh start

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

integration: install ## Contract and integration tests: starts a real Kafka broker and Milvus server
	$(BIN)/pytest tests/contract tests/integration

bench: install ## Benchmarks (not tests); figures go to docs/benchmarks.md
	$(BIN)/python -m bench.streams
	$(BIN)/python -m bench.consolidation
	$(BIN)/python -m bench.recall
	$(BIN)/python -m bench.ranker_kernel
	$(BIN)/python -m bench.ranker_kernel --mmr 0.7
	$(BIN)/python -m bench.tokens

bench-gpu: install ## On a GPU machine: kernel, hot-cache search and hot recall on CUDA; figures go to docs/benchmarks.md
	scripts/bench-gpu.sh $(BIN)/python

test: lint typecheck imports unit integration ## Everything CI runs: lint, types, import contract, all tests
