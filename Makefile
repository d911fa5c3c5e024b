# Cascade: two commands on a fresh machine.
#   make run   -> venv + install + `cascade up --open` (embedded NATS, S3 and the five services, UI on
#                 :8080, opened signed in where there is a browser)
#   make test  -> venv + install + the whole pytest suite in parallel, the 20 slowest tests last
#                 (make test-unit / test-integration / test-e2e: one tier; PYTEST_WORKERS=1: serial)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
TORCH_WHEELS ?= /opt/wheels
# Tests run in parallel processes (pytest-xdist): the tests of a file together on one worker
# (its module fixtures made once) but for the files tests/conftest.py spreads; every server a
# test starts is on random ports. Most tests wait on servers more than they compute, hence
# more workers than cores: on 2 cores 4 workers took 247 s, 3 took 265 s.
PYTEST_WORKERS ?= 4
# Python keeps the bytecode of what it imports (in $(VENV)/pycache, not beside the sources) even
# where the environment says not to (PYTHONDONTWRITEBYTECODE=1, as Docker images often set):
# otherwise each of the hundreds of Python processes a test run starts (services, `cascade`
# commands, workers) compiles every module it imports again, about half of the suite's CPU time.
export PYTHONDONTWRITEBYTECODE :=
export PYTHONPYCACHEPREFIX := $(abspath $(VENV))/pycache
PYTEST_RUN := $(BIN)/python -m pytest -q --dist loadgroup --durations=20
PYTEST := $(PYTEST_RUN) -n $(PYTEST_WORKERS)

.PHONY: run test test-unit test-integration test-e2e setup lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# One install run (one resolve), no bytecode compiling of the installed files (Python
	@# compiles what it imports, once). uv (from PyPI, into the venv: a second) resolves and
	@# unpacks in seconds what pip takes half a minute for; pip does it where uv cannot be had
	@# or fails. Downloads stay in uv's and pip's caches (~/.cache), so a fresh clone on this
	@# machine downloads nothing. PyTorch's CPU build only from a wheel already on this machine
	@# (never a download of a CUDA build): with it the `cascade profile hf` recipe tests run,
	@# without it they are skipped.
	@$(BIN)/python -m pip install -q --no-compile uv >/dev/null 2>&1 || true
	@install() { if [ -x $(BIN)/uv ] && $(BIN)/uv pip install -q --python $(BIN)/python "$$@"; then :; \
	  else $(BIN)/python -m pip install -q --no-compile "$$@"; fi; }; \
	if [ -d "$(TORCH_WHEELS)" ] && install --find-links "$(TORCH_WHEELS)" -e '.[dev,hf]' \
	    'torch==2.13.0+cpu' 2>/dev/null; then :; \
	else echo "note: no local PyTorch CPU wheel in $(TORCH_WHEELS); the hf recipe tests will be skipped"; \
	  install -e '.[dev]'; fi
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/cascade up --open

# A fresh checkout has no bytecode yet: the modules the suite imports compiled once, in two
# processes, before the workers and their children would each compile them at the same moment
# (tests/support/warm_bytecode.py); once per venv.
WARM := $(VENV)/.bytecode-warm
$(WARM): $(STAMP)
	@$(BIN)/python -m tests.support.warm_bytecode heavy & $(BIN)/python -m tests.support.warm_bytecode light; wait
	@touch $@

test: $(STAMP) $(WARM)
	$(PYTEST) $(PYTEST_ARGS)

# the fast loop: unit tests without the refits and real captures (marked slow; `make test` runs them).
# Unit tests compute and never wait on a server, so one worker per core: more workers only collect the
# tier again each (on 2 cores: 2 workers 36 s whole, 4 workers 48 s).
UNIT_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
test-unit: $(STAMP) $(WARM)
	$(PYTEST_RUN) -n $(UNIT_WORKERS) tests/unit -m "not slow" $(PYTEST_ARGS)

test-integration: $(STAMP) $(WARM)
	$(PYTEST) tests/integration $(PYTEST_ARGS)

test-e2e: $(STAMP) $(WARM)
	$(PYTEST) tests/e2e $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check shared services programs tests samples
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/cascade bench predict
	$(BIN)/cascade bench prepare
	$(BIN)/cascade bench scenarios

clean:
	rm -rf $(VENV) .cascade .pytest_cache
