"""Live: a (simulated) vLLM started with --api-key, supervised by the real ``guardian run``.

The guardian reads the key from the server's own command line through /proc, its canary
authenticates, and a busy loop in the engine is still caught. Afterwards every output is
searched for the key: the log, ``status --json``, /metrics, and the whole state dir (incident
files, evidence bundles, the embedded Redis' append-only file that holds the alerts).
"""

from __future__ import annotations

import urllib.request

import pytest

from vllm_guardian.sim.control import SimServer, free_port, http_request
from tests.support.guardian_process import GuardianProcess
from tests.support.guardian_process import fire

pytestmark = pytest.mark.live

SECRET = "sk-live-test-7d3e9b1c0a"


@pytest.fixture
def keyed_sim():
    server = SimServer(startup_delay=2.0, api_key=SECRET).start()
    try:
        server.wait_ready(60)
        yield server
    finally:
        server.stop()


def test_the_simulated_server_guards_v1_and_leaves_health_and_metrics_open(keyed_sim):
    host, port = keyed_sim.host, keyed_sim.port
    assert http_request(host, port, "GET", "/v1/models")[0] == 401
    assert http_request(host, port, "GET", "/v1/models", api_key="wrong")[0] == 401
    assert http_request(host, port, "GET", "/v1/models", api_key=SECRET)[0] == 200
    assert http_request(host, port, "GET", "/health")[0] == 200
    assert http_request(host, port, "GET", "/metrics")[0] == 200


def test_a_busy_loop_behind_an_api_key_is_caught_and_the_key_is_in_no_output(tmp_path, keyed_sim):
    metrics_port = free_port()
    g = GuardianProcess(tmp_path, keyed_sim.port, extra={"api": {"http": f"127.0.0.1:{metrics_port}"}}).start()
    try:
        assert g.wait_ready(30), g.log_text()
        onset = fire(keyed_sim, "busy_loop")
        inc = g.wait_incident("busy_loop", timeout=40)
        assert inc is not None, g.log_text()
        print(f"\nbusy_loop behind --api-key: onset->incident {inc['opened_at'] - onset:.1f}s")
        status = g.status()
        assert status is not None
        assert status["api_keys"] == {"sim": f"--api-key of pid {keyed_sim.pid}"}
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
        status_text = str(status)
    finally:
        assert g.stop() == 0, g.log_text()
    state = b"".join(p.read_bytes() for p in g.state_dir.rglob("*") if p.is_file())
    assert len(state) > 0  # incidents, evidence and the alerts AOF were written there
    for name, text in (("log", g.log_text()), ("status", status_text), ("metrics", metrics)):
        assert SECRET not in text, f"the key leaked into the {name}"
    assert SECRET.encode() not in state, "the key leaked into the state dir"
