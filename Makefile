# Cascade: two commands on a fresh machine.
#   make run   -> venv + install + `cascade up` (embedded NATS, S3 and the five services, UI on :8080)
#   make test  -> venv + install + the whole pytest suite (make test-unit / test-integration / test-e2e: one tier)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
TORCH_WHEELS ?= /opt/wheels

.PHONY: run test test-unit test-integration test-e2e setup lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@# PyTorch's CPU build only from a wheel already on this machine (never a download of a
	@# CUDA build): with it the `cascade profile hf` recipe test runs, without it it is skipped.
	@if [ -d "$(TORCH_WHEELS)" ] && $(BIN)/python -m pip install -q \
	    --find-links "$(TORCH_WHEELS)" 'torch==2.13.0+cpu' 2>/dev/null; then \
	  $(BIN)/python -m pip install -q -e '.[hf]' || echo "note: transformers not installed; the hf recipe test will be skipped"; \
	else echo "note: no local PyTorch CPU wheel in $(TORCH_WHEELS); the hf recipe test will be skipped"; fi
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/cascade up

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit $(PYTEST_ARGS)

test-integration: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration $(PYTEST_ARGS)

test-e2e: $(STAMP)
	$(BIN)/python -m pytest -q tests/e2e $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check shared services programs tests samples
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/cascade bench predict
	$(BIN)/cascade bench prepare
	$(BIN)/cascade bench scenarios

clean:
	rm -rf $(VENV) .cascade .pytest_cache
