# The two commands of the README: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test unit live demo bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

unit: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit tests/component

live: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/live

demo: $(STAMP)
	$(BIN)/guardian demo

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) build *.egg-info
