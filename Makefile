# Set-up commands for a fresh machine (pip only, idempotent):
#   make serve   install vixio and run `vixio serve --config config.yaml`
#   make test    install the test dependencies and run the whole suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONFIG ?= config.yaml

.PHONY: serve test install install-test docs bench clean

$(PY):
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "vixio needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install -e ".[xiaozhi]"
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PY) -m pip install -e ".[xiaozhi,test]"
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

serve: install
	$(VENV)/bin/vixio serve --config $(CONFIG)

test: install-test
	$(PY) -m pytest

docs: install
	$(PY) scripts/update_config_docs.py

bench: install-test
	for script in bench/bench_*.py; do $(PY) $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache
