# The two commands a newcomer runs: `make demo` (the main job on the local lab) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup system-deps demo plan test lint clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

setup: $(BIN)/.installed

system-deps:
	./scripts/install-system-deps.sh

plan: setup
	$(BIN)/gpuready plan inventory/example.py

demo: setup system-deps
	./scripts/demo.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: setup system-deps lint
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache reports
