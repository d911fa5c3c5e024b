# Cascade: two commands on a fresh machine.
#   make run   -> venv + install + `cascade up` (embedded NATS, S3 and the five services, UI on :8080)
#   make test  -> venv + install + the whole pytest suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test setup lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/cascade up

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check shared services tests
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/cascade bench predict
	$(BIN)/cascade bench prepare
	$(BIN)/cascade bench scenarios

clean:
	rm -rf $(VENV) .cascade .pytest_cache
