"""The e2e tier: a real vLLM (``.e2e/venv``, built by ``make e2e-vllm``) against the real guardian.

Registers the ``e2e`` marker (every test here carries it) and collects the measured numbers
(``results`` fixture) into the terminal summary and ``.e2e/results/e2e-latest.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
RESULTS_FILE = HERE.parents[1] / ".e2e" / "results" / "e2e-latest.json"
RESULTS_KEY = pytest.StashKey[dict]()


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: a real vLLM server (make e2e-vllm builds its venv)")
    config.stash[RESULTS_KEY] = {}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def results(request) -> dict:
    """Measured numbers, by name; printed at the end of the run and written as JSON."""
    return request.config.stash[RESULTS_KEY]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    got = config.stash.get(RESULTS_KEY, {})
    if not got:
        return
    terminalreporter.section("real vLLM e2e measurements")
    for key, value in got.items():
        shown = f"{value:.1f}" if isinstance(value, float) else str(value)
        terminalreporter.write_line(f"{key:<44} {shown}")
    RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_FILE.write_text(json.dumps({"time": time.time(), "results": got}, indent=2))
    terminalreporter.write_line(f"(written to {RESULTS_FILE})")
